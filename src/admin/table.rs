//! Text output for people: a table padded to its widest cells, durations, absent numbers.

/// A plain text table: columns padded to their widest cell, two spaces apart.
pub(super) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table whose first row is `headers`.
    pub(super) fn new(headers: &[&str]) -> Table {
        Table {
            rows: vec![headers.iter().map(|header| header.to_string()).collect()],
        }
    }

    /// Adds a row; a short one (an error line) leaves the last columns empty.
    pub(super) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The last cell of a short row (an error line) runs on unpadded and widens nothing.
    pub(super) fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|column| {
                self.rows
                    .iter()
                    .filter(|row| row.len() == columns || column + 1 < row.len())
                    .filter_map(|row| row.get(column))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(column, cell)| format!("{cell:<width$}", width = widths[column]))
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

/// Milliseconds for a person: `850ms`, `4.2s`, `3m05s`.
pub(super) fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1_000.0),
        _ => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1_000),
    }
}

/// A number (a log index, a permit count), or `-` when there is none.
pub(super) fn index(index: Option<u64>) -> String {
    index.map_or_else(|| "-".into(), |index| index.to_string())
}

#[cfg(test)]
mod tests {
    use super::{Table, human_ms};

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(4_210), "4.2s");
        assert_eq!(human_ms(185_000), "3m05s");
    }

    #[test]
    fn a_table_pads_every_column_to_its_widest_full_row_cell() {
        let mut table = Table::new(&["A", "BB"]);
        table.row(vec!["long".into(), "x".into()]);
        table.row(vec!["error: a short row widens nothing".into()]);
        assert_eq!(
            table.render(),
            "A     BB\nlong  x\nerror: a short row widens nothing\n"
        );
    }
}
