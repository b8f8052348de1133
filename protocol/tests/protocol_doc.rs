//! `docs/PROTOCOL.md` and the wire decoder cannot drift apart: every op, field, error code and
//! event the document declares is the decoder's, and every one the decoder knows is documented.
//!
//! # What is read from PROTOCOL.md
//!
//! - **Ops.** An op section is a heading `### <number> `<op>``, up to the next heading. Its
//!   field table is the one headed `| field | type | | range |`: one row per field, the field
//!   in backticks, its JSON type (`string`, `integer`, `number`, `boolean`, `array`, `object`)
//!   and whether it is `req`, `opt`, `one of` (exactly one of the op's `one of` fields is
//!   given) or `` alias of `f` `` (another name the decoder takes for field `f`). An op
//!   section without a field table documents an op without fields.
//! - **Volumes**: the table headed `| field | type | range |` (§8.9.1) lists the fields of a
//!   route's volume, several to a row (`` `lat`, `lon` ``).
//! - **The op list** of §3: the bullet that starts ``- `op` (string, required): one of``.
//! - **Error codes**: the first column of the table headed `| code | sent when |`.
//! - **Events**: the table headed `| event | fields | sent when |`, each field written
//!   `` `name` (type) ``.
//! - **Examples**: every JSON value in a ```` ```json ```` block (lines starting with `#` are
//!   comments), and in any other block every quoted payload (`-m '{"id":...}'`) and every
//!   message printed after its topic (`hk/v1/rsp/drone-7 {"id":...}`): the mosquitto session.
//!   An object with `op` is a request, with `ok` a response, with `event` an event. A response
//!   answers the last request before it, in the same block, with its id.
//!
//! # What is asked of the decoder
//!
//! Nothing is copied from the code into this file. Serde derives, from the one declaration of
//! each enum, the list it names when it refuses an unknown variant (``unknown variant `x`,
//! expected one of ...``) or a field an op does not take (``unknown field `x`, expected ...``,
//! the answer PROTOCOL.md §3 documents for a typo); those lists are the decoder's ops, error
//! codes and events, and each op's fields. The hand-written lists the crate keeps beside them
//! (`Op::NAMES`, which the decoder checks an op name against, and `ErrorCode::ALL`) are held to
//! the same lists.
//!
//! # The checks
//!
//! - The ops: serde's, `Op::NAMES`, the op sections and §3's list are the same, in one order;
//!   each op has an example request answered by an example response.
//! - Each op: its documented fields are the fields the decoder takes; a request with only the
//!   `req` fields (and one `one of` field) of its first example is accepted as that op; without
//!   any one `req` field it is `bad_request` ``missing field `f` ``; without its `one of`
//!   field, or with two, it is `bad_request` naming them; an alias decodes as its field; a
//!   field the op does not take is `bad_request` (``unknown field``); every example's field
//!   has the documented JSON type.
//! - Every example request decodes as its op, or is answered in its block by exactly the error
//!   the decoder gives; every example response and event decodes into the typed `Response` or
//!   `Event` and encodes back to the same JSON (so a documented field the types do not know
//!   fails).
//! - Volumes: the documented fields are the ones the decoder takes in every `volumes` and in
//!   `airspace.query`'s `volume`; each is required in a route's volume; the examples' volumes
//!   have the documented types.
//! - The error codes: serde's, `ErrorCode::ALL` and the table, in one order.
//! - The events: serde's and the table; each event has an example with the documented fields.
//!
//! Every failure names the op, field, code or event, and the line and section of PROTOCOL.md.

use std::collections::BTreeSet;
use std::fmt;

use hivekeeper_protocol::{ErrorCode, Event, Op, Request, Response};
use serde_json::{Map, Value, json};

const PROTOCOL_MD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/PROTOCOL.md");

/// A name no op, field, code or event has: what the decoder is asked to refuse.
const PROBE: &str = "x_undocumented";

// ---------------------------------------------------------------------------------------------
// The document
// ---------------------------------------------------------------------------------------------

/// Where something is in PROTOCOL.md, for the failure messages.
#[derive(Debug, Clone)]
struct Place {
    /// 1-based line number.
    line: usize,
    /// The text of the heading the line is under.
    section: String,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PROTOCOL.md line {} ({})", self.line, self.section)
    }
}

/// Whether an op's field must, may or must in a group be given.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Presence {
    /// `req`: the op is refused without it.
    Required,
    /// `opt`: the op is accepted without it.
    Optional,
    /// `one of`: exactly one of the op's `one of` fields is given.
    OneOf,
    /// `` alias of `f` ``: another name for field `f`.
    AliasOf(String),
}

/// One row of an op's field table.
#[derive(Debug, Clone)]
struct FieldDoc {
    name: String,
    /// The JSON type the type column names.
    json_type: String,
    presence: Presence,
    place: Place,
}

/// One op section.
#[derive(Debug, Clone)]
struct OpDoc {
    name: String,
    place: Place,
    fields: Vec<FieldDoc>,
}

impl OpDoc {
    fn field(&self, name: &str) -> Option<&FieldDoc> {
        self.fields.iter().find(|field| field.name == name)
    }

    fn fields_with(&self, wanted: impl Fn(&Presence) -> bool) -> Vec<&FieldDoc> {
        self.fields
            .iter()
            .filter(|field| wanted(&field.presence))
            .collect()
    }
}

/// One field of a route's volume: a row of the volume table may name several.
#[derive(Debug, Clone)]
struct VolumeFieldDoc {
    name: String,
    /// The JSON type the type column names.
    json_type: String,
    place: Place,
}

/// One row of the error-code table.
#[derive(Debug, Clone)]
struct CodeDoc {
    name: String,
    place: Place,
}

/// One row of the event table.
#[derive(Debug, Clone)]
struct EventDoc {
    name: String,
    /// The fields beside `event`, in the order written.
    fields: Vec<String>,
    place: Place,
}

/// What an example JSON value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExampleKind {
    Request,
    Response,
    Event,
}

/// One example JSON value.
#[derive(Debug, Clone)]
struct Example {
    kind: ExampleKind,
    value: Value,
    place: Place,
}

/// The examples of one code block, in order.
#[derive(Debug, Clone)]
struct Block {
    examples: Vec<Example>,
}

/// Everything the checks read from PROTOCOL.md.
#[derive(Debug)]
struct Doc {
    ops: Vec<OpDoc>,
    /// §3's list of ops, and where it is.
    op_list: Vec<String>,
    op_list_place: Place,
    /// The fields of a route's volume, every one required.
    volume_fields: Vec<VolumeFieldDoc>,
    codes: Vec<CodeDoc>,
    events: Vec<EventDoc>,
    blocks: Vec<Block>,
}

impl Doc {
    /// Reads and parses PROTOCOL.md; panics with every place that does not follow the rules in
    /// the module doc, since the checks would then read less than the document says.
    fn read() -> Doc {
        let text = std::fs::read_to_string(PROTOCOL_MD)
            .unwrap_or_else(|e| panic!("reading {PROTOCOL_MD}: {e}"));
        match Doc::parse(&text) {
            Ok(doc) => doc,
            Err(problems) => panic!(
                "docs/PROTOCOL.md does not follow the rules this test reads it by \
                 (protocol/tests/protocol_doc.rs):\n- {}",
                problems.join("\n- ")
            ),
        }
    }

    fn parse(text: &str) -> Result<Doc, Vec<String>> {
        let mut parser = Parser::default();
        for (index, line) in text.lines().enumerate() {
            parser.line(index + 1, line);
        }
        parser.finish()
    }

    fn examples(&self, kind: ExampleKind) -> impl Iterator<Item = &Example> {
        self.blocks
            .iter()
            .flat_map(|block| &block.examples)
            .filter(move |example| example.kind == kind)
    }

    /// The example requests of `op`, in document order.
    fn requests_of<'a>(&'a self, op: &'a str) -> impl Iterator<Item = &'a Example> {
        self.examples(ExampleKind::Request)
            .filter(move |example| example.value["op"] == op)
    }
}

/// A table as written: its header cells and its rows' cells.
struct Table {
    place: Place,
    /// The op section it is in, if any (an index into `Parser::ops`).
    op: Option<usize>,
    header: Vec<String>,
    rows: Vec<(Place, Vec<String>)>,
}

/// An open code block.
struct OpenBlock {
    language: String,
    lines: Vec<(usize, String)>,
}

/// Reads PROTOCOL.md line by line.
#[derive(Default)]
struct Parser {
    section: String,
    /// The op section the current line is in (an index into `ops`).
    op: Option<usize>,
    ops: Vec<OpDoc>,
    tables: Vec<Table>,
    /// The table being read, while its lines follow each other.
    table: Option<Table>,
    block: Option<OpenBlock>,
    blocks: Vec<Block>,
    /// §3's op bullet while it is being read, and where it started.
    op_bullet: Option<(Place, String)>,
    op_list: Option<(Place, Vec<String>)>,
    problems: Vec<String>,
}

const OP_BULLET: &str = "- `op` (string, required): one of";

impl Parser {
    fn place(&self, line: usize) -> Place {
        Place {
            line,
            section: self.section.clone(),
        }
    }

    fn line(&mut self, number: usize, line: &str) {
        if let Some(block) = &mut self.block {
            if line.starts_with("```") {
                let block = self.block.take().expect("a block is open");
                self.close_block(block);
            } else {
                block.lines.push((number, line.to_string()));
            }
            return;
        }
        if !line.starts_with('|') {
            self.close_table();
        }
        if let Some((_, bullet)) = &mut self.op_bullet {
            if line.trim().is_empty() || line.starts_with("- ") {
                let (place, bullet) = self.op_bullet.take().expect("a bullet is open");
                let names = code_spans(&bullet[OP_BULLET.len()..]);
                self.op_list = Some((place, names));
            } else {
                bullet.push(' ');
                bullet.push_str(line.trim());
                return;
            }
        }
        if let Some(language) = line.strip_prefix("```") {
            self.block = Some(OpenBlock {
                language: language.trim().to_string(),
                lines: Vec::new(),
            });
        } else if line.starts_with('#') {
            self.heading(number, line);
        } else if line.starts_with('|') {
            self.table_line(number, line);
        } else if line.starts_with(OP_BULLET) {
            if self.op_list.is_some() {
                self.problems.push(format!(
                    "{}: a second `op` bullet; §3 lists the ops once",
                    self.place(number)
                ));
            }
            self.op_bullet = Some((self.place(number), line.to_string()));
        }
    }

    fn heading(&mut self, number: usize, line: &str) {
        let level = line.chars().take_while(|c| *c == '#').count();
        self.section = line[level..].trim().to_string();
        self.op = None;
        if level == 3
            && let Some(name) = op_heading(&self.section)
        {
            self.ops.push(OpDoc {
                name: name.to_string(),
                place: self.place(number),
                fields: Vec::new(),
            });
            self.op = Some(self.ops.len() - 1);
        }
    }

    fn table_line(&mut self, number: usize, line: &str) {
        let cells: Vec<String> = line
            .trim()
            .trim_start_matches('|')
            .trim_end_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_string())
            .collect();
        let place = self.place(number);
        match &mut self.table {
            None => {
                self.table = Some(Table {
                    place,
                    op: self.op,
                    header: cells,
                    rows: Vec::new(),
                });
            }
            Some(table) => {
                let separator = cells
                    .iter()
                    .all(|cell| !cell.is_empty() && cell.chars().all(|c| c == '-' || c == ':'));
                if !(table.rows.is_empty() && separator) {
                    table.rows.push((place, cells));
                }
            }
        }
    }

    fn close_table(&mut self) {
        if let Some(table) = self.table.take() {
            self.tables.push(table);
        }
    }

    fn close_block(&mut self, block: OpenBlock) {
        let mut values = Vec::new();
        if block.language == "json" {
            // Comment lines become empty lines, so that offsets still give line numbers.
            let first_line = block.lines.first().map_or(0, |(number, _)| *number);
            let text: String = block
                .lines
                .iter()
                .map(|(_, line)| {
                    if line.trim_start().starts_with('#') {
                        "\n".to_string()
                    } else {
                        format!("{line}\n")
                    }
                })
                .collect();
            let mut stream = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
            loop {
                let start = stream.byte_offset();
                let Some(next) = stream.next() else { break };
                let skipped = text[start..]
                    .find(|c: char| !c.is_whitespace())
                    .unwrap_or(0);
                let line = first_line + text[..start + skipped].matches('\n').count();
                match next {
                    Ok(value) => values.push((line, value)),
                    Err(e) => {
                        self.problems.push(format!(
                            "{}: a ```json block holds something that is not JSON ({e}); \
                             a template that is not JSON goes in a ```text block",
                            self.place(line)
                        ));
                        break;
                    }
                }
            }
        } else {
            for (number, line) in &block.lines {
                let Some(json) = message_in_line(line) else {
                    continue;
                };
                match serde_json::from_str::<Value>(json) {
                    Ok(value) => values.push((*number, value)),
                    Err(e) => self.problems.push(format!(
                        "{}: the JSON on this line does not parse ({e})",
                        self.place(*number)
                    )),
                }
            }
        }
        let mut examples = Vec::new();
        for (line, value) in values {
            let place = self.place(line);
            let kinds: Vec<ExampleKind> = [
                ("op", ExampleKind::Request),
                ("ok", ExampleKind::Response),
                ("event", ExampleKind::Event),
            ]
            .into_iter()
            .filter(|(key, _)| value.get(key).is_some())
            .map(|(_, kind)| kind)
            .collect();
            match kinds[..] {
                [kind] => examples.push(Example { kind, value, place }),
                _ => self.problems.push(format!(
                    "{place}: an example is a request (`op`), a response (`ok`) or an event \
                     (`event`), exactly one: {value}"
                )),
            }
        }
        self.blocks.push(Block { examples });
    }

    fn finish(mut self) -> Result<Doc, Vec<String>> {
        self.close_table();
        if self.block.is_some() {
            self.problems
                .push("a code block is not closed at the end of the document".into());
        }
        let mut codes = Vec::new();
        let mut events = Vec::new();
        let mut volume_fields = Vec::new();
        let mut code_tables = 0;
        let mut event_tables = 0;
        let mut volume_tables = 0;
        for table in std::mem::take(&mut self.tables) {
            let header: Vec<&str> = table.header.iter().map(String::as_str).collect();
            match header[..] {
                ["field", "type", "", "range"] => self.field_table(table),
                ["field", "type", "range"] => {
                    volume_tables += 1;
                    for (place, cells) in table.rows {
                        match volume_row(&cells) {
                            Ok((names, json_type)) => {
                                volume_fields.extend(names.into_iter().map(|name| {
                                    VolumeFieldDoc {
                                        name,
                                        json_type: json_type.clone(),
                                        place: place.clone(),
                                    }
                                }));
                            }
                            Err(why) => self.problems.push(format!("{place}: {why}")),
                        }
                    }
                }
                ["code", "sent when"] => {
                    code_tables += 1;
                    for (place, cells) in table.rows {
                        match code_span(&cells[0]) {
                            Some(name) => codes.push(CodeDoc {
                                name: name.to_string(),
                                place,
                            }),
                            None => self.problems.push(format!(
                                "{place}: an error code row starts with the code in backticks, \
                                 not {:?}",
                                cells[0]
                            )),
                        }
                    }
                }
                ["event", "fields", "sent when"] => {
                    event_tables += 1;
                    for (place, cells) in table.rows {
                        match event_row(&cells) {
                            Ok((name, fields)) => events.push(EventDoc {
                                name,
                                fields,
                                place,
                            }),
                            Err(why) => self.problems.push(format!("{place}: {why}")),
                        }
                    }
                }
                _ => {}
            }
        }
        if code_tables != 1 {
            self.problems.push(format!(
                "one error-code table (`| code | sent when |`) is expected, found {code_tables}"
            ));
        }
        if volume_tables != 1 {
            self.problems.push(format!(
                "one volume table (`| field | type | range |`, §8.9.1) is expected, found \
                 {volume_tables}"
            ));
        }
        if event_tables != 1 {
            self.problems.push(format!(
                "one event table (`| event | fields | sent when |`) is expected, found \
                 {event_tables}"
            ));
        }
        let Some((op_list_place, op_list)) = self.op_list else {
            self.problems.push(format!(
                "no bullet starting `{OP_BULLET}` lists the ops (§3)"
            ));
            return Err(self.problems);
        };
        if self.problems.is_empty() {
            Ok(Doc {
                ops: self.ops,
                op_list,
                op_list_place,
                volume_fields,
                codes,
                events,
                blocks: self.blocks,
            })
        } else {
            Err(self.problems)
        }
    }

    fn field_table(&mut self, table: Table) {
        let Some(op) = table.op else {
            self.problems.push(format!(
                "{}: a field table (`| field | type | | range |`) outside an op section",
                table.place
            ));
            return;
        };
        if !self.ops[op].fields.is_empty() {
            self.problems.push(format!(
                "{}: a second field table in the section of `{}`",
                table.place, self.ops[op].name
            ));
            return;
        }
        for (place, cells) in table.rows {
            match field_row(&cells) {
                Ok((name, json_type, presence)) => self.ops[op].fields.push(FieldDoc {
                    name,
                    json_type,
                    presence,
                    place,
                }),
                Err(why) => self.problems.push(format!("{place}: {why}")),
            }
        }
    }
}

/// The JSON message a line of a shell or text block shows, if any: a quoted payload
/// (`-m '{"id":...}'`), or a message printed after its topic (`hk/v1/rsp/drone-7 {"id":...}`).
/// A template such as `{"event": "<name>", ...fields}` is neither.
fn message_in_line(line: &str) -> Option<&str> {
    let start = line.find("{\"")?;
    let before = &line[..start];
    if before.ends_with('\'') {
        let length = line[start..].find("}'")? + 1;
        return Some(&line[start..start + length]);
    }
    let topic = before.split_whitespace().last()?;
    if topic.starts_with("hk/v1/") && before.ends_with(' ') {
        let end = line.rfind('}')? + 1;
        return Some(&line[start..end]);
    }
    None
}

/// The op an op heading names: `8.10 `fence.check`` gives `fence.check`.
fn op_heading(heading: &str) -> Option<&str> {
    let (number, rest) = heading.split_once(' ')?;
    let numbered = !number.is_empty() && number.chars().all(|c| c.is_ascii_digit() || c == '.');
    if numbered { code_span(rest) } else { None }
}

/// The text of a cell that is exactly one code span.
fn code_span(cell: &str) -> Option<&str> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!inner.is_empty() && !inner.contains('`')).then_some(inner)
}

/// Every code span in `text`, in order.
fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

const JSON_TYPES: [&str; 6] = ["string", "integer", "number", "boolean", "array", "object"];

/// A row of an op's field table: `| `name` | type | req | range |`.
fn field_row(cells: &[String]) -> Result<(String, String, Presence), String> {
    let [name, json_type, presence, _range] = cells else {
        return Err(format!(
            "a field row has four cells (field, type, req/opt, range), not {}",
            cells.len()
        ));
    };
    let name = code_span(name)
        .ok_or_else(|| format!("a field row names one field in backticks, not {name:?}"))?;
    if !JSON_TYPES.contains(&json_type.as_str()) {
        return Err(format!(
            "field `{name}`: the type is one of {JSON_TYPES:?}, not {json_type:?}"
        ));
    }
    let presence = match presence.as_str() {
        "req" => Presence::Required,
        "opt" => Presence::Optional,
        "one of" => Presence::OneOf,
        other => match other.strip_prefix("alias of ").and_then(code_span) {
            Some(target) => Presence::AliasOf(target.to_string()),
            None => {
                return Err(format!(
                    "field `{name}`: the third cell is `req`, `opt`, `one of` or \
                     ``alias of `field` ``, not {other:?}"
                ));
            }
        },
    };
    Ok((name.to_string(), json_type.clone(), presence))
}

/// A row of the volume table: `` | `lat`, `lon` | number | range | ``.
fn volume_row(cells: &[String]) -> Result<(Vec<String>, String), String> {
    let [names, json_type, _range] = cells else {
        return Err(format!(
            "a volume table row has three cells (fields, type, range), not {}",
            cells.len()
        ));
    };
    let cell = names;
    let names: Option<Vec<String>> = cell
        .split(", ")
        .map(|name| code_span(name).map(str::to_string))
        .collect();
    let names = names.ok_or_else(|| {
        format!("a volume table row names its fields in backticks, separated by commas: {cell:?}")
    })?;
    if !JSON_TYPES.contains(&json_type.as_str()) {
        return Err(format!(
            "fields {names:?}: the type is one of {JSON_TYPES:?}, not {json_type:?}"
        ));
    }
    Ok((names, json_type.clone()))
}

/// A row of the event table: the event in backticks, and its fields written
/// `` `name` (type) `` and separated by commas.
fn event_row(cells: &[String]) -> Result<(String, Vec<String>), String> {
    let [name, fields, _when] = cells else {
        return Err(format!("an event row has three cells, not {}", cells.len()));
    };
    let name = code_span(name)
        .ok_or_else(|| format!("an event row starts with the event in backticks, not {name:?}"))?;
    // Commas inside a field's parentheses (its type) do not separate fields.
    let mut items = vec![String::new()];
    let mut depth = 0_i32;
    for c in fields.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(String::new());
                continue;
            }
            _ => {}
        }
        items.last_mut().expect("never empty").push(c);
    }
    let mut names = Vec::new();
    for item in items {
        let item = item.trim();
        let field = item
            .split_once(" (")
            .and_then(|(field, _)| code_span(field))
            .ok_or_else(|| {
                format!("event `{name}`: a field is written `name` (type), not {item:?}")
            })?;
        names.push(field.to_string());
    }
    Ok((name.to_string(), names))
}

// ---------------------------------------------------------------------------------------------
// The decoder
// ---------------------------------------------------------------------------------------------

/// The names serde lists when it refuses `PROBE`: `message` is ``unknown variant `PROBE`,
/// expected one of `a`, `b`, `c` `` (or `` `a` or `b` ``, `` `a` ``, `there are no fields`).
fn serde_names(message: &str) -> Vec<String> {
    let (_, listed) = message
        .split_once(&format!("`{PROBE}`, "))
        .unwrap_or_else(|| panic!("serde's refusal does not name {PROBE}: {message}"));
    if listed.starts_with("there are no") {
        return Vec::new();
    }
    let listed = listed
        .strip_prefix("expected ")
        .unwrap_or_else(|| panic!("serde's refusal changed its form: {message}"));
    let names = code_spans(listed);
    assert!(
        !names.is_empty(),
        "serde's refusal lists nothing: {message}"
    );
    names
}

/// Every op the decoder knows, in declaration order.
fn decoder_ops() -> Vec<String> {
    let refusal =
        serde_json::from_value::<Op>(json!({ "op": PROBE })).expect_err("no op is called PROBE");
    serde_names(&refusal.to_string())
}

/// Every error code, in declaration order.
fn decoder_codes() -> Vec<String> {
    let refusal =
        serde_json::from_value::<ErrorCode>(json!(PROBE)).expect_err("no code is called PROBE");
    serde_names(&refusal.to_string())
}

/// Every event, in declaration order.
fn decoder_events() -> Vec<String> {
    let refusal = serde_json::from_value::<Event>(json!({ "event": PROBE }))
        .expect_err("no event is called PROBE");
    serde_names(&refusal.to_string())
}

/// The fields the decoder takes for `op` (aliases included), as it lists them when it refuses
/// a field the op does not take. Serde refuses an unknown field as it meets it, before it
/// looks for missing ones, so the request needs no other field. Errs when the request is not
/// refused so.
fn decoder_fields(op: &str) -> Result<BTreeSet<String>, String> {
    refused_fields(op, json!({ "id": "probe", "op": op, PROBE: 1 }))
}

/// The fields the decoder lists when it refuses `request`, an `op` with `PROBE` in one of its
/// objects.
fn refused_fields(op: &str, request: Value) -> Result<BTreeSet<String>, String> {
    let prefix = format!("{op}: unknown field `{PROBE}`, ");
    match Request::decode(request.to_string().as_bytes()) {
        Err(e) if e.code == ErrorCode::BadRequest && e.message.starts_with(&prefix) => {
            Ok(serde_names(&e.message).into_iter().collect())
        }
        Err(e) => Err(format!(
            "{request} is refused with {} {:?}, not bad_request \"{prefix}...\" (PROTOCOL.md \
             §3, \"Unknown fields are rejected\")",
            e.code, e.message
        )),
        Ok(decoded) => Err(format!(
            "{request} is accepted ({decoded:?}); PROTOCOL.md §3 says unknown fields are \
             rejected"
        )),
    }
}

fn decode(request: &Map<String, Value>) -> Result<Request, hivekeeper_protocol::ProtocolError> {
    Request::decode(Value::Object(request.clone()).to_string().as_bytes())
}

/// Whether two JSON values are the same, numbers compared by value (`20` is `20.0`: a float
/// field encodes an integer example as a float).
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_u64(), y.as_u64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, x)| y.get(key).is_some_and(|y| same_json(x, y)))
        }
        _ => a == b,
    }
}

/// The top-level keys whose values differ, to say what a round trip lost or changed.
fn differing_keys(a: &Value, b: &Value) -> Vec<String> {
    let empty = Map::new();
    let a = a.as_object().unwrap_or(&empty);
    let b = b.as_object().unwrap_or(&empty);
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|key| match (a.get(*key), b.get(*key)) {
            (Some(x), Some(y)) => !same_json(x, y),
            _ => true,
        })
        .map(|key| format!("`{key}`"))
        .collect()
}

fn has_json_type(value: &Value, json_type: &str) -> bool {
    match json_type {
        "string" => value.is_string(),
        "integer" => value.is_u64() || value.is_i64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    }
}

/// Fails with every mismatch, one per line.
fn assert_none(what: &str, mismatches: Vec<String>) {
    assert!(
        mismatches.is_empty(),
        "{} mismatch(es) between docs/PROTOCOL.md and the decoder ({what}):\n- {}",
        mismatches.len(),
        mismatches.join("\n- ")
    );
}

/// Mismatches between two lists of names that should be the same, in the same order.
fn compare_lists(
    what: &str,
    left_name: &str,
    left: &[String],
    right_name: &str,
    right: &[String],
) -> Vec<String> {
    let mut mismatches = Vec::new();
    for name in left.iter().filter(|name| !right.contains(name)) {
        mismatches.push(format!(
            "{what} `{name}` is in {left_name}, not in {right_name}"
        ));
    }
    for name in right.iter().filter(|name| !left.contains(name)) {
        mismatches.push(format!(
            "{what} `{name}` is in {right_name}, not in {left_name}"
        ));
    }
    if mismatches.is_empty() && left != right {
        mismatches.push(format!(
            "{left_name} and {right_name} list the {what}s in different orders:\n  {}\n  {}",
            left.join(", "),
            right.join(", ")
        ));
    }
    mismatches
}

// ---------------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------------

/// The ops serde knows, `Op::NAMES` (what the decoder checks an op name against), the op
/// sections of §8 and §3's list are the same, in one order; each op has an example request
/// with its response.
#[test]
fn every_op_is_documented_and_every_documented_op_is_the_decoders() {
    let doc = Doc::read();
    let decoder = decoder_ops();
    let names: Vec<String> = Op::NAMES.iter().map(|name| name.to_string()).collect();
    let sections: Vec<String> = doc.ops.iter().map(|op| op.name.clone()).collect();
    let mut mismatches = compare_lists(
        "op",
        "the decoder's `Op` enum",
        &decoder,
        "`Op::NAMES`",
        &names,
    );
    mismatches.extend(compare_lists(
        "op",
        "the decoder's `Op` enum",
        &decoder,
        "the op sections of PROTOCOL.md §8 (`### <number> `<op>``)",
        &sections,
    ));
    mismatches.extend(compare_lists(
        "op",
        "the decoder's `Op` enum",
        &decoder,
        &format!("the list of ops at {}", doc.op_list_place),
        &doc.op_list,
    ));
    for op in &doc.ops {
        let answered = doc.blocks.iter().any(|block| {
            block.examples.iter().enumerate().any(|(index, example)| {
                example.kind == ExampleKind::Request
                    && example.value["op"] == op.name.as_str()
                    && block.examples[index + 1..].iter().any(|later| {
                        later.kind == ExampleKind::Response
                            && later.value["id"] == example.value["id"]
                    })
            })
        });
        if !answered {
            mismatches.push(format!(
                "{}: `{}` has no example request answered by an example response in \
                 PROTOCOL.md",
                op.place, op.name
            ));
        }
    }
    assert_none("ops", mismatches);
}

/// Each documented op takes exactly its documented fields, required and optional as
/// documented; a field it does not take is refused.
#[test]
fn every_op_takes_exactly_its_documented_fields() {
    let doc = Doc::read();
    let decoder = decoder_ops();
    let mut mismatches = Vec::new();
    for op in doc.ops.iter().filter(|op| decoder.contains(&op.name)) {
        check_field_names(op, &mut mismatches);
        check_presence(&doc, op, &mut mismatches);
        check_example_types(&doc, op, &mut mismatches);
    }
    assert_none("op fields", mismatches);
}

/// The documented fields, aliases included, are the ones the decoder takes.
fn check_field_names(op: &OpDoc, mismatches: &mut Vec<String>) {
    let decoder = match decoder_fields(&op.name) {
        Ok(fields) => fields,
        Err(why) => {
            mismatches.push(format!("{}: {why}", op.place));
            return;
        }
    };
    let documented: BTreeSet<String> = op.fields.iter().map(|f| f.name.clone()).collect();
    for field in documented.difference(&decoder) {
        let place = &op.field(field).expect("documented").place;
        mismatches.push(format!(
            "{place}: `{}` documents field `{field}`, which the decoder does not take (it \
             takes {decoder:?})",
            op.name
        ));
    }
    for field in decoder.difference(&documented) {
        mismatches.push(format!(
            "{}: the decoder takes field `{field}` of `{}`, which its field table does not \
             document",
            op.place, op.name
        ));
    }
    for field in &op.fields {
        if let Presence::AliasOf(target) = &field.presence
            && op.field(target).is_none()
        {
            mismatches.push(format!(
                "{}: `{}` is an alias of `{target}`, which is not in the table",
                field.place, field.name
            ));
        }
    }
}

/// `req` fields are required, `opt` ones optional, `one of` ones exactly one, and an alias
/// decodes as its field; shown on the op's first example request that decodes.
fn check_presence(doc: &Doc, op: &OpDoc, mismatches: &mut Vec<String>) {
    let Some(example) = doc
        .requests_of(&op.name)
        .find(|example| Request::decode(example.value.to_string().as_bytes()).is_ok())
    else {
        // Reported by the op check (no example) or the example check (refused).
        return;
    };
    let fields = example
        .value
        .as_object()
        .expect("an example request is an object");
    let one_of = op.fields_with(|p| *p == Presence::OneOf);
    if one_of.len() == 1 {
        mismatches.push(format!(
            "{}: `{}` has one `one of` field; a `one of` group has two or more",
            one_of[0].place, op.name
        ));
    }
    // The example with only `id`, `op`, the required fields and its `one of` field.
    let mut minimal = Map::new();
    minimal.insert("id".into(), fields["id"].clone());
    minimal.insert("op".into(), fields["op"].clone());
    for field in op.fields_with(|p| *p == Presence::Required) {
        // An example may give a required field by an alias.
        let alias = op
            .fields
            .iter()
            .find(|alias| alias.presence == Presence::AliasOf(field.name.clone()));
        let given = fields
            .get(&field.name)
            .or_else(|| alias.and_then(|alias| fields.get(&alias.name)));
        match given {
            Some(value) => {
                minimal.insert(field.name.clone(), value.clone());
            }
            None => mismatches.push(format!(
                "{}: the example request of `{}` lacks `{}`, which {} marks `req`",
                example.place, op.name, field.name, field.place
            )),
        }
    }
    let chosen = one_of.iter().find(|field| fields.contains_key(&field.name));
    if let Some(field) = chosen {
        minimal.insert(field.name.clone(), fields[&field.name].clone());
    } else if !one_of.is_empty() {
        mismatches.push(format!(
            "{}: the example request of `{}` gives none of its `one of` fields",
            example.place, op.name
        ));
    }
    let minimal_request = match decode(&minimal) {
        Ok(request) if request.op.name() == op.name => request,
        Ok(request) => {
            mismatches.push(format!(
                "{}: `{}` with its required fields decodes as `{}`",
                op.place,
                op.name,
                request.op.name()
            ));
            return;
        }
        Err(e) => {
            mismatches.push(format!(
                "{}: `{}` with only the fields marked `req` (and one `one of`), {}, is refused \
                 ({e}); a field the decoder needs is marked `opt`",
                op.place,
                op.name,
                Value::Object(minimal.clone())
            ));
            return;
        }
    };
    for field in op.fields_with(|p| *p == Presence::Required) {
        let mut without = minimal.clone();
        if without.remove(&field.name).is_none() {
            continue;
        }
        let expected = format!("{}: missing field `{}`", op.name, field.name);
        match decode(&without) {
            Err(e) if e.code == ErrorCode::BadRequest && e.message == expected => {}
            Err(e) => mismatches.push(format!(
                "{}: `{}` without `{}` is refused with {} {:?}, not bad_request {expected:?}",
                field.place, op.name, field.name, e.code, e.message
            )),
            Ok(_) => mismatches.push(format!(
                "{}: `{}` without `{}` is accepted, but the field is marked `req`",
                field.place, op.name, field.name
            )),
        }
    }
    if let Some(chosen) = chosen {
        check_one_of(doc, op, &minimal, &chosen.name, mismatches);
    }
    for field in &op.fields {
        let Presence::AliasOf(target) = &field.presence else {
            continue;
        };
        let Some(value) = minimal.get(target) else {
            mismatches.push(format!(
                "{}: the alias `{}` is checked in place of `{target}`, which is not marked `req`",
                field.place, field.name
            ));
            continue;
        };
        let mut aliased = minimal.clone();
        aliased.remove(target);
        aliased.insert(field.name.clone(), value.clone());
        match decode(&aliased) {
            Ok(request) if request == minimal_request => {}
            Ok(request) => mismatches.push(format!(
                "{}: `{}` with `{}` in place of `{target}` decodes as {request:?}, not as \
                 {minimal_request:?}",
                field.place, op.name, field.name
            )),
            Err(e) => mismatches.push(format!(
                "{}: `{}` with `{}` in place of `{target}` is refused ({e})",
                field.place, op.name, field.name
            )),
        }
    }
}

/// Exactly one `one of` field: each alone is accepted (its value from an example), none or
/// two are `bad_request` naming the group.
fn check_one_of(
    doc: &Doc,
    op: &OpDoc,
    minimal: &Map<String, Value>,
    chosen: &str,
    mismatches: &mut Vec<String>,
) {
    let group = op.fields_with(|p| *p == Presence::OneOf);
    let mut bare = minimal.clone();
    bare.remove(chosen);
    let names_group = |message: &str| {
        group
            .iter()
            .all(|field| message.contains(&format!("`{}`", field.name)))
    };
    match decode(&bare) {
        Err(e) if e.code == ErrorCode::BadRequest && names_group(&e.message) => {}
        Err(e) => mismatches.push(format!(
            "{}: `{}` without any `one of` field is refused with {} {:?}, not bad_request \
             naming each of them",
            op.place, op.name, e.code, e.message
        )),
        Ok(_) => mismatches.push(format!(
            "{}: `{}` without any `one of` field is accepted",
            op.place, op.name
        )),
    }
    for field in &group {
        let Some(value) = doc
            .requests_of(&op.name)
            .find_map(|example| example.value.get(&field.name))
        else {
            mismatches.push(format!(
                "{}: no example request of `{}` gives its `one of` field `{}`",
                field.place, op.name, field.name
            ));
            continue;
        };
        let mut alone = bare.clone();
        alone.insert(field.name.clone(), value.clone());
        if let Err(e) = decode(&alone) {
            mismatches.push(format!(
                "{}: `{}` with `{}` as its `one of` field is refused ({e})",
                field.place, op.name, field.name
            ));
        }
        if field.name != chosen {
            let mut both = minimal.clone();
            both.insert(field.name.clone(), value.clone());
            match decode(&both) {
                Err(e) if e.code == ErrorCode::BadRequest && names_group(&e.message) => {}
                Err(e) => mismatches.push(format!(
                    "{}: `{}` with `{chosen}` and `{}` is refused with {} {:?}, not \
                     bad_request naming each `one of` field",
                    field.place, op.name, field.name, e.code, e.message
                )),
                Ok(_) => mismatches.push(format!(
                    "{}: `{}` with `{chosen}` and `{}` is accepted; exactly one is allowed",
                    field.place, op.name, field.name
                )),
            }
        }
    }
}

/// Every field of every example request of the op has its documented JSON type.
fn check_example_types(doc: &Doc, op: &OpDoc, mismatches: &mut Vec<String>) {
    for example in doc.requests_of(&op.name) {
        let fields = example
            .value
            .as_object()
            .expect("an example request is an object");
        for (name, value) in fields {
            let Some(field) = op.field(name) else {
                continue;
            };
            if !has_json_type(value, &field.json_type) {
                mismatches.push(format!(
                    "{}: `{}`'s `{name}` is {value}, not of the type {} documented at {}",
                    example.place, op.name, field.json_type, field.place
                ));
            }
        }
    }
}

/// Every example request decodes as its op (or is answered in its block by exactly the
/// decoder's refusal); every example response and event reads back into the typed `Response`
/// or `Event` and encodes to the same JSON.
#[test]
fn every_example_decodes_and_reads_back_unchanged() {
    let doc = Doc::read();
    let mut mismatches = Vec::new();
    for block in &doc.blocks {
        for (index, example) in block.examples.iter().enumerate() {
            let earlier = &block.examples[..index];
            match example.kind {
                ExampleKind::Request => {
                    check_example_request(example, &block.examples[index + 1..], &mut mismatches)
                }
                ExampleKind::Response => check_example_response(example, earlier, &mut mismatches),
                ExampleKind::Event => check_example_event(example, &mut mismatches),
            }
        }
    }
    assert_none("examples", mismatches);
}

fn check_example_request(example: &Example, later: &[Example], mismatches: &mut Vec<String>) {
    let wire = example.value.to_string();
    let op = example.value["op"].as_str().unwrap_or_default();
    let refusal = match Request::decode(wire.as_bytes()) {
        Ok(request) if request.op.name() == op => return,
        Ok(request) => {
            mismatches.push(format!(
                "{}: the example request of `{op}` decodes as `{}`",
                example.place,
                request.op.name()
            ));
            return;
        }
        Err(e) => e,
    };
    // A refused example is one the document answers with the decoder's exact refusal.
    let answer = later.iter().find(|later| {
        later.kind == ExampleKind::Response && later.value["id"] == example.value["id"]
    });
    let expected: Value = serde_json::from_slice(&refusal.to_response().encode())
        .expect("a response encodes as JSON");
    match answer {
        Some(answer) if same_json(&answer.value, &expected) => {}
        Some(answer) => mismatches.push(format!(
            "{}: the example request of `{op}` is refused with {expected}, but {} answers it \
             {}",
            example.place, answer.place, answer.value
        )),
        None => mismatches.push(format!(
            "{}: the example request of `{op}` is refused ({refusal}): {wire}",
            example.place
        )),
    }
}

fn check_example_response(example: &Example, earlier: &[Example], mismatches: &mut Vec<String>) {
    let id = &example.value["id"];
    let block_has_requests = earlier.iter().any(|e| e.kind == ExampleKind::Request);
    let answers_a_request = earlier
        .iter()
        .any(|e| e.kind == ExampleKind::Request && e.value["id"] == *id);
    if id.is_string() && block_has_requests && !answers_a_request {
        mismatches.push(format!(
            "{}: the example response has id {id}, which no request before it in its block has",
            example.place
        ));
    }
    match Response::decode(example.value.to_string().as_bytes()) {
        Ok(response) => {
            let encoded: Value =
                serde_json::from_slice(&response.encode()).expect("a response encodes as JSON");
            if !same_json(&encoded, &example.value) {
                mismatches.push(format!(
                    "{}: the example response reads back as {encoded}, not as written ({} \
                     differ): a field the `Response` type does not have, or of another shape",
                    example.place,
                    differing_keys(&encoded, &example.value).join(", ")
                ));
            }
        }
        Err(e) => mismatches.push(format!(
            "{}: the example response is not a `Response` ({e}): {}",
            example.place, example.value
        )),
    }
}

fn check_example_event(example: &Example, mismatches: &mut Vec<String>) {
    match Event::decode(example.value.to_string().as_bytes()) {
        Ok(event) => {
            let encoded: Value =
                serde_json::from_slice(&event.encode()).expect("an event encodes as JSON");
            if !same_json(&encoded, &example.value) {
                mismatches.push(format!(
                    "{}: the example event reads back as {encoded}, not as written ({} differ)",
                    example.place,
                    differing_keys(&encoded, &example.value).join(", ")
                ));
            }
        }
        Err(e) => mismatches.push(format!(
            "{}: the example event is not an `Event` ({e}): {}",
            example.place, example.value
        )),
    }
}

/// The codes serde knows, `ErrorCode::ALL` and §9's table are the same, in one order.
#[test]
fn every_error_code_is_documented_and_every_documented_code_is_the_decoders() {
    let doc = Doc::read();
    let decoder = decoder_codes();
    let all: Vec<String> = ErrorCode::ALL
        .iter()
        .map(|code| code.as_str().to_string())
        .collect();
    let table: Vec<String> = doc.codes.iter().map(|code| code.name.clone()).collect();
    let table_place = doc
        .codes
        .first()
        .map_or_else(|| "PROTOCOL.md".to_string(), |code| code.place.to_string());
    let mut mismatches = compare_lists(
        "error code",
        "the `ErrorCode` enum",
        &decoder,
        "`ErrorCode::ALL`",
        &all,
    );
    mismatches.extend(compare_lists(
        "error code",
        "the `ErrorCode` enum",
        &decoder,
        &format!("the error-code table at {table_place}"),
        &table,
    ));
    assert_none("error codes", mismatches);
}

/// The events serde knows and §10's table are the same; each documented event has an example
/// with exactly its documented fields (which the example check holds to the `Event` type).
#[test]
fn every_event_is_documented_and_every_documented_event_is_the_decoders() {
    let doc = Doc::read();
    let decoder: BTreeSet<String> = decoder_events().into_iter().collect();
    let table: BTreeSet<String> = doc.events.iter().map(|event| event.name.clone()).collect();
    let mut mismatches = Vec::new();
    for name in decoder.difference(&table) {
        mismatches.push(format!(
            "event `{name}` is in the `Event` enum, not in PROTOCOL.md's event table (§10)"
        ));
    }
    for event in &doc.events {
        if !decoder.contains(&event.name) {
            mismatches.push(format!(
                "{}: event `{}` is documented, but the `Event` enum has no such event",
                event.place, event.name
            ));
        }
        let Some(example) = doc
            .examples(ExampleKind::Event)
            .find(|example| example.value["event"] == event.name.as_str())
        else {
            mismatches.push(format!(
                "{}: event `{}` has no example in PROTOCOL.md",
                event.place, event.name
            ));
            continue;
        };
        let documented: BTreeSet<&str> = event.fields.iter().map(String::as_str).collect();
        let shown: BTreeSet<&str> = example
            .value
            .as_object()
            .expect("an example event is an object")
            .keys()
            .map(String::as_str)
            .filter(|key| *key != "event")
            .collect();
        if documented != shown {
            mismatches.push(format!(
                "{}: event `{}` documents the fields {documented:?}, its example at {} has \
                 {shown:?}",
                event.place, event.name, example.place
            ));
        }
    }
    assert_none("events", mismatches);
}

/// The volume table of §8.9.1 lists the fields of a route's volume, which the decoder takes in
/// `route.reserve`, `route.amend` and `airspace.query` (`volumes`), and in `airspace.query`'s
/// `volume`; every one is required in a route's volume; the examples' volumes have the
/// documented types.
#[test]
fn every_volume_field_is_documented_and_every_documented_one_is_the_decoders() {
    let doc = Doc::read();
    let table_place = doc.volume_fields.first().map_or_else(
        || "PROTOCOL.md".to_string(),
        |field| field.place.to_string(),
    );
    let documented: BTreeSet<String> = doc.volume_fields.iter().map(|f| f.name.clone()).collect();
    let mut mismatches = Vec::new();
    let volume = json!({ PROBE: 1 });
    let probes = [
        (
            "route.reserve",
            "volumes",
            json!({"id": "probe", "op": "route.reserve", "name": "n",
            "lease": "L", "volumes": [volume]}),
        ),
        (
            "route.amend",
            "volumes",
            json!({"id": "probe", "op": "route.amend", "name": "n",
            "lease": "L", "volumes": [volume]}),
        ),
        (
            "airspace.query",
            "volumes",
            json!({"id": "probe", "op": "airspace.query",
            "volumes": [volume]}),
        ),
        (
            "airspace.query",
            "volume",
            json!({"id": "probe", "op": "airspace.query",
            "volume": volume}),
        ),
    ];
    for (op, field, request) in probes {
        match refused_fields(op, request) {
            Ok(decoder) => {
                for name in documented.difference(&decoder) {
                    mismatches.push(format!(
                        "the volume table at {table_place} documents `{name}`, which \
                         `{op}`'s `{field}` does not take"
                    ));
                }
                for name in decoder.difference(&documented) {
                    mismatches.push(format!(
                        "`{op}`'s `{field}` takes `{name}`, which the volume table at \
                         {table_place} does not document"
                    ));
                }
            }
            Err(why) => mismatches.push(format!("`{op}`'s `{field}`: {why}")),
        }
    }
    // Every field of a route's volume is required, shown on the first example route.
    let example = doc
        .requests_of("route.reserve")
        .find(|example| Request::decode(example.value.to_string().as_bytes()).is_ok());
    match example {
        None => mismatches.push("no example `route.reserve` decodes".to_string()),
        Some(example) => {
            for field in &doc.volume_fields {
                let mut request = example.value.clone();
                let removed = request["volumes"][0]
                    .as_object_mut()
                    .and_then(|volume| volume.remove(&field.name));
                if removed.is_none() {
                    mismatches.push(format!(
                        "{}: the first volume of the example route lacks `{}`, which {} \
                         documents",
                        example.place, field.name, field.place
                    ));
                    continue;
                }
                let expected = format!("route.reserve: missing field `{}`", field.name);
                match Request::decode(request.to_string().as_bytes()) {
                    Err(e) if e.code == ErrorCode::BadRequest && e.message == expected => {}
                    Err(e) => mismatches.push(format!(
                        "{}: a route's volume without `{}` is refused with {} {:?}, not \
                         bad_request {expected:?}",
                        field.place, field.name, e.code, e.message
                    )),
                    Ok(_) => mismatches.push(format!(
                        "{}: a route's volume without `{}` is accepted; every field of a \
                         volume is required",
                        field.place, field.name
                    )),
                }
            }
        }
    }
    for example in doc.examples(ExampleKind::Request) {
        let volumes = example.value.get("volumes").and_then(Value::as_array);
        let volume = example.value.get("volume");
        for volume in volumes.into_iter().flatten().chain(volume) {
            for (name, value) in volume.as_object().into_iter().flatten() {
                let Some(field) = doc.volume_fields.iter().find(|f| f.name == *name) else {
                    continue;
                };
                if !has_json_type(value, &field.json_type) {
                    mismatches.push(format!(
                        "{}: a volume's `{name}` is {value}, not of the type {} documented at \
                         {}",
                        example.place, field.json_type, field.place
                    ));
                }
            }
        }
    }
    assert_none("volume fields", mismatches);
}
