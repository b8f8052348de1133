//! Bounds on everything an agent can send, each with a precise error message.
//!
//! DESIGN.md §5.6: bounded everything. These are wire-level bounds that hold on every node and
//! never change at run time. Bounds that an operator configures (lease TTL range, how many
//! leases or waiters) live in the coordinator's replicated limits instead.

/// Largest request payload accepted, in bytes. Below rumqttc's default 10 KiB packet limit so
/// a request that fits here also fits any default client; a waypoint reservation with every
/// field set is under 400 bytes.
pub const REQUEST_BYTES_MAX: usize = 8 * 1024;
/// Longest agent id, in bytes (DESIGN.md §2: `[A-Za-z0-9_.-]{1,64}`).
pub const AGENT_ID_BYTES_MAX: usize = 64;
/// Longest request id, in bytes.
pub const REQUEST_ID_BYTES_MAX: usize = 128;
/// Longest resource name (lock, semaphore, waypoint), in bytes of UTF-8.
pub const NAME_BYTES_MAX: usize = 256;
/// Longest wait a request may ask for: one day. Longer waits are better expressed as no
/// `wait_ms` at all (wait while the lease lives).
pub const WAIT_MS_MAX: u64 = 86_400_000;
/// Largest semaphore capacity.
pub const SEM_LIMIT_MAX: u32 = 1_000_000;
/// Largest waypoint radius, in metres (10 km). Keeps a spatial query to a bounded neighbourhood.
pub const RADIUS_M_MAX: f64 = 10_000.0;
/// Altitude bounds accepted for a waypoint band, in metres (below the Dead Sea shore to well
/// above any drone ceiling).
pub const ALT_M_MIN: f64 = -1_000.0;
/// See [`ALT_M_MIN`].
pub const ALT_M_MAX: f64 = 100_000.0;

/// A field out of its bounds. The text names the field, the bound and what was sent; it is
/// what a `bad_request` answer says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidField(pub String);

impl From<String> for InvalidField {
    fn from(text: String) -> Self {
        InvalidField(text)
    }
}

/// The text, for an error response's `message`.
impl From<InvalidField> for String {
    fn from(invalid: InvalidField) -> Self {
        invalid.0
    }
}

impl From<&str> for InvalidField {
    fn from(text: &str) -> Self {
        InvalidField(text.to_string())
    }
}

/// An [`InvalidField`] with a formatted text.
macro_rules! invalid {
    ($($text:tt)*) => {
        $crate::validate::InvalidField(format!($($text)*))
    };
}

/// The bytes an agent id may contain (`[A-Za-z0-9_.-]`), as a table indexed by byte.
const AGENT_ID_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] = b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-';
        byte += 1;
    }
    table
};

/// Checks an agent id: 1 to 64 bytes of `[A-Za-z0-9_.-]`. The id is the last topic segment, so
/// MQTT wildcards and separators (`+`, `#`, `/`) can never appear in it.
pub fn agent_id(agent: &str) -> Result<(), InvalidField> {
    if agent.is_empty() || agent.len() > AGENT_ID_BYTES_MAX {
        return Err(invalid!(
            "agent id must be 1 to {AGENT_ID_BYTES_MAX} characters, got {}",
            agent.len()
        ));
    }
    // Every request is checked at decode and again when applied from the log, so the common
    // case is one pass over the bytes through a table, without a branch per byte; only a
    // refused id pays for finding the offending character.
    if !agent
        .bytes()
        .fold(true, |ok, b| ok & AGENT_ID_BYTE[usize::from(b)])
        && let Some(bad) = agent
            .chars()
            .find(|c| !(c.is_ascii() && AGENT_ID_BYTE[*c as usize]))
    {
        return Err(invalid!(
            "agent id {agent:?} contains {bad:?}; allowed are A-Z a-z 0-9 _ . -"
        ));
    }
    Ok(())
}

/// Checks a cluster member's name: the same rule as an agent id (1 to 64 bytes of
/// `[A-Za-z0-9_.-]`), so it reads well in a table and a log line.
pub fn member_name(name: &str) -> Result<(), InvalidField> {
    agent_id(name).map_err(|message| InvalidField(message.0.replacen("agent id", "member name", 1)))
}

/// Checks an account's name, which is the agent id it authenticates (so the same rules, with
/// `name` in the message).
pub fn account_name(name: &str) -> Result<(), InvalidField> {
    agent_id(name)
        .map_err(|message| InvalidField(message.0.replacen("agent id", "`name` (an agent id)", 1)))
}

/// Checks a member's inter-node address: `host:port`, at most 256 bytes, where host is a
/// host name (`node-4.local`), an IPv4 address or a bracketed IPv6 address (`[fd00::4]`), and
/// port is 1 to 65535. Checked before anything is proposed: a typo must not reach the
/// membership.
pub fn member_addr(addr: &str) -> Result<(), InvalidField> {
    bounded_text("addr", addr, NAME_BYTES_MAX)?;
    let not_host_port = || invalid!("`addr` {addr:?} is not host:port");
    let (host, port) = addr.rsplit_once(':').ok_or_else(not_host_port)?;
    if host.is_empty() {
        return Err(not_host_port());
    }
    match port.parse::<u16>() {
        Ok(0) => return Err(invalid!("`addr` {addr:?} has port 0: give the peer port")),
        Ok(_) => {}
        Err(_) => return Err(not_host_port()),
    }
    let ipv6 = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .is_some_and(|inner| inner.parse::<std::net::Ipv6Addr>().is_ok());
    if ipv6 || host.parse::<std::net::Ipv4Addr>().is_ok() || is_host_name(host) {
        return Ok(());
    }
    Err(invalid!(
        "`addr` {addr:?}: {host:?} is not a host name, an IPv4 address or a bracketed IPv6 address"
    ))
}

/// A DNS host name: dot-separated labels of 1 to 63 letters, digits and hyphens, no label
/// starting or ending with a hyphen, 253 bytes at most.
fn is_host_name(host: &str) -> bool {
    host.len() <= 253
        && host.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Most a leader waits for a new member to catch up (`admin.member.add`'s
/// `catch_up_timeout_ms`): ten minutes, enough for a large snapshot over a slow link.
pub const CATCH_UP_TIMEOUT_MS_MAX: u64 = 600_000;

/// Checks `admin.member.add`'s `catch_up_timeout_ms`: in `[1, CATCH_UP_TIMEOUT_MS_MAX]`.
pub fn catch_up_timeout_ms(timeout_ms: u64) -> Result<(), InvalidField> {
    if timeout_ms == 0 || timeout_ms > CATCH_UP_TIMEOUT_MS_MAX {
        return Err(invalid!(
            "`catch_up_timeout_ms` is {timeout_ms}, it must be in [1, {CATCH_UP_TIMEOUT_MS_MAX}]"
        ));
    }
    Ok(())
}

/// Checks a request id: 1 to 128 bytes, no control characters.
pub fn request_id(id: &str) -> Result<(), InvalidField> {
    bounded_text("id", id, REQUEST_ID_BYTES_MAX)
}

/// Checks a resource name (`name` or `resource`): 1 to 256 bytes of UTF-8, no control
/// characters. Slashes are fine (`gateway/config`): names never become topic segments.
pub fn name(field: &str, value: &str) -> Result<(), InvalidField> {
    bounded_text(field, value, NAME_BYTES_MAX)
}

/// Most resources in one `admin.resources` page, and the default: a name is at most 256
/// bytes, so a page stays well inside the default 64 KiB MQTT packet.
pub const RESOURCE_PAGE_MAX: u32 = 100;

/// Checks `admin.resources`' paging fields: a `prefix` of at most 256 bytes, an `after`
/// cursor `kind/name`, a `limit` from 1 to [`RESOURCE_PAGE_MAX`].
pub fn resource_page(
    prefix: Option<&str>,
    after: Option<&str>,
    limit: Option<u32>,
) -> Result<(), InvalidField> {
    if let Some(prefix) = prefix {
        name("prefix", prefix)?;
    }
    if let Some(after) = after {
        resource_cursor(after)?;
    }
    match limit {
        Some(limit) if limit == 0 || limit > RESOURCE_PAGE_MAX => Err(invalid!(
            "`limit` is {limit}, it must be from 1 to {RESOURCE_PAGE_MAX}"
        )),
        _ => Ok(()),
    }
}

/// Fewest snapshot bytes an `admin.snapshot` page may be asked to carry: small enough for the
/// smallest `packet_bytes_max` a service accepts (9 KiB) once base64 has grown it by a third.
pub const SNAPSHOT_PAGE_BYTES_MIN: u32 = 1024;

/// Most snapshot bytes one `admin.snapshot` page may carry: 512 KiB, 683 KiB of base64, inside
/// the 1 MiB packet the SDK and the CLI accept (a service's `packet_bytes_max` may be smaller:
/// the answer is then `too_large`, and the CLI asks again for smaller pages).
pub const SNAPSHOT_PAGE_BYTES_MAX: u32 = 512 * 1024;

/// Snapshot bytes in an `admin.snapshot` page when the request does not say: 32 KiB, 43 KiB of
/// base64, inside the default 64 KiB MQTT packet.
pub const SNAPSHOT_PAGE_BYTES_DEFAULT: u32 = 32 * 1024;

/// Checks `admin.snapshot`'s fields: an `offset` only with the `index` of the snapshot it is
/// in, and a `page_bytes_max` from [`SNAPSHOT_PAGE_BYTES_MIN`] to [`SNAPSHOT_PAGE_BYTES_MAX`].
pub fn snapshot_page(
    index: Option<u64>,
    offset: Option<u64>,
    page_bytes_max: Option<u32>,
) -> Result<(), InvalidField> {
    if index.is_none() && offset.is_some() {
        return Err(
            "`offset` needs `index`: the log index the first page answered, so that every \
             page is of the same snapshot"
                .into(),
        );
    }
    match page_bytes_max {
        Some(bytes) if !(SNAPSHOT_PAGE_BYTES_MIN..=SNAPSHOT_PAGE_BYTES_MAX).contains(&bytes) => {
            Err(invalid!(
                "`page_bytes_max` is {bytes}, it must be from {SNAPSHOT_PAGE_BYTES_MIN} to \
                 {SNAPSHOT_PAGE_BYTES_MAX}"
            ))
        }
        _ => Ok(()),
    }
}

/// Splits an `admin.resources` cursor, `kind/name` (the `next_after` of a page), into its
/// kind and name.
pub fn resource_cursor(after: &str) -> Result<(crate::ResourceKind, &str), InvalidField> {
    let parsed = after.split_once('/').and_then(|(kind, rest)| {
        let kind = crate::ResourceKind::parse(kind)?;
        name("after", rest).ok().map(|()| (kind, rest))
    });
    parsed.ok_or_else(|| {
        invalid!("`after` is {after:?}, not a cursor `kind/name` (a page's `next_after`)")
    })
}

fn bounded_text(field: &str, value: &str, bytes_max: usize) -> Result<(), InvalidField> {
    if value.is_empty() {
        return Err(invalid!("`{field}` must not be empty"));
    }
    if value.len() > bytes_max {
        return Err(invalid!(
            "`{field}` is {} bytes long, the maximum is {bytes_max}",
            value.len()
        ));
    }
    if has_control(value) {
        return Err(invalid!("`{field}` must not contain control characters"));
    }
    Ok(())
}

/// Whether `text` contains a control character (C0, DEL or C1).
///
/// Every request is validated at decode and again when applied from the log, so the common
/// case (printable ASCII) is decided eight bytes at a time without a branch per byte: a word
/// is flagged if any byte is below 0x20, is 0x7f or has its high bit set. Only flagged text,
/// which is refused or not ASCII, takes the exact walk over its chars.
fn has_control(text: &str) -> bool {
    let mut chunks = text.as_bytes().chunks_exact(8);
    let mut flagged = 0u64;
    for chunk in &mut chunks {
        let word: [u8; 8] = chunk.try_into().expect("chunks_exact yields 8 bytes");
        flagged |= word_flags(u64::from_le_bytes(word));
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(false, |flagged, &b| flagged | !(0x20..0x7f).contains(&b));
    (flagged != 0 || tail) && text.chars().any(char::is_control)
}

/// High bit of each byte of `word` that is below 0x20, equal to 0x7f or at least 0x80. The
/// "has a byte less than n" trick (`(x - n) & !x`, exact for n <= 0x80 when no byte has its
/// high bit set), once for 0x20 and once for zero after XOR with 0x7f; any high byte is
/// flagged by itself, so the tricks' inexactness above 0x7f does not matter.
fn word_flags(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word;
    let del = word ^ (ONES * 0x7f);
    let is_del = del.wrapping_sub(ONES) & !del;
    (below_space | is_del | word) & HIGH_BITS
}

/// Checks an optional `wait_ms`.
pub fn wait_ms(wait_ms: Option<u64>) -> Result<(), InvalidField> {
    match wait_ms {
        Some(ms) if ms > WAIT_MS_MAX => Err(invalid!(
            "`wait_ms` is {ms}, the maximum is {WAIT_MS_MAX} (one day); omit it to wait while \
             the lease lives"
        )),
        _ => Ok(()),
    }
}

/// Checks a reservation's time window as far as it can be checked without a clock: when both
/// ends are given the window `[start_ms, end_ms)` must not be empty. Whether it lies in the past,
/// too far ahead or is too long is the state machine's check, against the entry's time and the
/// replicated limits.
pub fn window(start_ms: Option<u64>, end_ms: Option<u64>) -> Result<(), InvalidField> {
    match (start_ms, end_ms) {
        (Some(start_ms), Some(end_ms)) if end_ms <= start_ms => Err(invalid!(
            "the window is empty: `end_ms` ({end_ms}) is not after `start_ms` ({start_ms})"
        )),
        _ => Ok(()),
    }
}

/// Most volumes in one route (`route.reserve`, `route.amend`).
pub const ROUTE_VOLUMES_MAX: usize = 64;

/// Checks a route's volumes: 1 to [`ROUTE_VOLUMES_MAX`], each cylinder within the waypoint
/// ranges and each window non-empty; the message names the volume by its index from 0.
pub fn volumes(volumes: &[crate::Volume]) -> Result<(), InvalidField> {
    if volumes.is_empty() || volumes.len() > ROUTE_VOLUMES_MAX {
        return Err(invalid!(
            "`volumes` has {} volumes, a route has 1 to {ROUTE_VOLUMES_MAX}",
            volumes.len()
        ));
    }
    for (i, volume) in volumes.iter().enumerate() {
        volume
            .area()
            .check_ranges()
            .and_then(|()| window(Some(volume.start_ms), Some(volume.end_ms)))
            .map_err(|reason| format!("volume {i}: {reason}"))?;
    }
    Ok(())
}

/// Most locks in one multi-lock (`lock.acquire_all`, `lock.release_all`).
pub const LOCK_NAMES_MAX: usize = 64;

/// Checks a multi-lock's `names`: 1 to [`LOCK_NAMES_MAX`], each a resource name, none twice;
/// the message names a bad one by its index from 0.
pub fn lock_names(names: &[String]) -> Result<(), InvalidField> {
    if names.is_empty() || names.len() > LOCK_NAMES_MAX {
        return Err(invalid!(
            "`names` has {} names, a multi-lock takes 1 to {LOCK_NAMES_MAX}",
            names.len()
        ));
    }
    for (i, lock) in names.iter().enumerate() {
        name(&format!("names[{i}]"), lock)?;
        if names[..i].contains(lock) {
            return Err(invalid!("`names` has {lock:?} twice; name each lock once"));
        }
    }
    Ok(())
}

/// Checks a `lease.grant`'s `ttl_ms` (the service's configured range is the state machine's
/// check; this is the wire's: positive).
pub fn ttl_ms(ttl_ms: u64) -> Result<(), InvalidField> {
    if ttl_ms == 0 {
        return Err("`ttl_ms` must be positive".into());
    }
    Ok(())
}

/// Longest lock-delay a lease may ask for (`lease.grant`'s `lock_delay_ms`): one minute, as
/// Consul bounds its sessions' lock-delay. Past a minute a dead holder's locks would sit idle
/// longer than any real holder needs to notice it lost them.
pub const LOCK_DELAY_MS_MAX: u64 = 60_000;

/// Checks a `lease.grant`'s `lock_delay_ms`: at most [`LOCK_DELAY_MS_MAX`].
pub fn lock_delay_ms(lock_delay_ms: u64) -> Result<(), InvalidField> {
    if lock_delay_ms > LOCK_DELAY_MS_MAX {
        return Err(invalid!(
            "`lock_delay_ms` is {lock_delay_ms}, the maximum is {LOCK_DELAY_MS_MAX} (one minute)"
        ));
    }
    Ok(())
}

/// Checks an acquire's optional `max_hold_ms` as far as the wire can: positive. That it is at
/// most the service's longest lease TTL is the state machine's check, against the replicated
/// limits.
pub fn max_hold_ms(max_hold_ms: Option<u64>) -> Result<(), InvalidField> {
    if max_hold_ms == Some(0) {
        return Err("`max_hold_ms` must be positive; omit it for no bound".into());
    }
    Ok(())
}

/// Checks a `sem.acquire`'s capacity and weight: `limit` in `[1, SEM_LIMIT_MAX]`, `permits` in
/// `[1, limit]`.
pub fn sem_acquire(limit: u32, permits: u32) -> Result<(), InvalidField> {
    if limit == 0 || limit > SEM_LIMIT_MAX {
        return Err(invalid!(
            "`limit` is {limit}, it must be in [1, {SEM_LIMIT_MAX}]"
        ));
    }
    if permits == 0 || permits > limit {
        return Err(invalid!(
            "`permits` is {permits}, it must be in [1, limit = {limit}]"
        ));
    }
    Ok(())
}

/// Checks a `barrier.enter`'s `count` as far as the wire can: at least 1. Its upper bound is
/// the state machine's check, derived from the replicated waiter bound (a round's other
/// members all wait at once).
pub fn barrier_count(count: u32) -> Result<(), InvalidField> {
    if count == 0 {
        return Err("`count` must be at least 1".into());
    }
    Ok(())
}

/// Checks that a float field is a finite number within `[min, max]`.
pub fn float_in(field: &str, value: f64, min: f64, max: f64) -> Result<(), InvalidField> {
    if !value.is_finite() || value < min || value > max {
        return Err(invalid!(
            "`{field}` is {value}, it must be in [{min}, {max}]"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::has_control;

    /// The word-at-a-time scan agrees with the char walk for every ASCII byte at every
    /// position of every length up to three words, and on text that is not ASCII.
    #[test]
    fn has_control_agrees_with_the_char_walk() {
        for len in 1..=24 {
            for position in 0..len {
                for byte in 0u8..=0x7f {
                    let mut bytes = vec![b'a'; len];
                    bytes[position] = byte;
                    let text = String::from_utf8(bytes).expect("ASCII");
                    let expected = text.chars().any(char::is_control);
                    assert_eq!(has_control(&text), expected, "{text:?}");
                }
            }
        }
        for text in [
            "caf\u{e9}",
            "\u{85}next-line",
            "\u{1F681}-pad-7",
            "a\u{9f}",
            "\u{a0}",
        ] {
            assert_eq!(
                has_control(text),
                text.chars().any(char::is_control),
                "{text:?}"
            );
        }
    }
}
