//! A reservation's priority, `0` (routine) to `3` (emergency).
//!
//! `waypoint.reserve`, `route.reserve` and `route.amend` take an optional `priority`; absent
//! means routine. A request that conflicts only with holders of a strictly lower priority
//! preempts them (each is told `reservation.preempted` with a vacate deadline) instead of
//! queueing behind them; among waiters a higher priority goes first (docs/PROTOCOL.md, §8.10).
//!
//! Decoded by hand rather than as a plain `u8`, so that every wrong value (a negative number,
//! a fraction, 4, a string) gets one message that names the field and its range, where serde's
//! own would say only "expected u8".

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// A reservation's priority level: 0 (routine) to [`Priority::EMERGENCY`] (3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Priority(u8);

impl Priority {
    /// Routine traffic, the default.
    pub const ROUTINE: Priority = Priority(0);
    /// The highest level: an emergency flight.
    pub const EMERGENCY: Priority = Priority(3);

    /// The level `level`, or `None` above [`Priority::EMERGENCY`].
    pub fn new(level: u8) -> Option<Priority> {
        (level <= Priority::EMERGENCY.0).then_some(Priority(level))
    }

    /// The level as a number, 0 to 3.
    pub fn level(self) -> u8 {
        self.0
    }

    /// Whether this is routine (0), the level left out of the wire form.
    pub fn is_routine(&self) -> bool {
        *self == Priority::ROUTINE
    }

    /// The one refusal text for a value that is not a level.
    fn out_of_range(value: impl fmt::Display) -> String {
        format!("`priority` is {value}; it must be an integer from 0 (routine) to 3 (emergency)")
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

struct PriorityVisitor;

impl<'de> Visitor<'de> for PriorityVisitor {
    type Value = Priority;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer from 0 (routine) to 3 (emergency)")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Priority, E> {
        u8::try_from(value)
            .ok()
            .and_then(Priority::new)
            .ok_or_else(|| E::custom(Priority::out_of_range(value)))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Priority, E> {
        match u64::try_from(value) {
            Ok(value) => self.visit_u64(value),
            Err(_) => Err(E::custom(Priority::out_of_range(value))),
        }
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Priority, E> {
        // Debug, so that 3.0 reads `3.0` and not `3`, which would look like a valid level.
        Err(E::custom(Priority::out_of_range(format!("{value:?}"))))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Priority, E> {
        Err(E::custom(Priority::out_of_range(format!("{value:?}"))))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Priority, E> {
        Err(E::custom(Priority::out_of_range(value)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Priority, E> {
        Err(E::custom(Priority::out_of_range("null")))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Priority, A::Error> {
        Err(de::Error::custom(Priority::out_of_range("a list")))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<Priority, A::Error> {
        Err(de::Error::custom(Priority::out_of_range("an object")))
    }
}

impl<'de> Deserialize<'de> for Priority {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PriorityVisitor)
    }
}
