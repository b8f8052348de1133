//! The stepwise decoder of a request: size, then JSON and the `id`, then the op name, then
//! the op's fields and their ranges, so that every failure gets the most precise code.

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::{Op, Request};
use crate::error::{ErrorCode, ProtocolError};
use crate::validate;

impl Request {
    /// Decodes and validates one request payload as received on `hk/v1/req/{agent}`.
    pub fn decode(payload: &[u8]) -> Result<Request, ProtocolError> {
        if payload.len() > validate::REQUEST_BYTES_MAX {
            return Err(ProtocolError {
                id: None,
                code: ErrorCode::TooLarge,
                message: format!(
                    "payload is {} bytes, the maximum is {}",
                    payload.len(),
                    validate::REQUEST_BYTES_MAX
                ),
            });
        }
        let value: Value = serde_json::from_slice(payload)
            .map_err(|e| ProtocolError::bad_request(None, format!("malformed JSON: {e}")))?;
        Request::from_value(value)
    }

    /// Validates an already parsed JSON value as a request.
    pub fn from_value(value: Value) -> Result<Request, ProtocolError> {
        let Value::Object(mut fields) = value else {
            return Err(ProtocolError::bad_request(
                None,
                "a request must be a JSON object",
            ));
        };
        let id = take_id(&mut fields)?;
        let op_name = match fields.get("op") {
            None => return Err(ProtocolError::bad_request(Some(id), "missing field `op`")),
            Some(Value::String(op)) => op.clone(),
            Some(_) => {
                return Err(ProtocolError::bad_request(
                    Some(id),
                    "`op` must be a string",
                ));
            }
        };
        if !Op::NAMES.contains(&op_name.as_str()) {
            return Err(ProtocolError {
                id: Some(id),
                code: ErrorCode::UnknownOp,
                message: format!(
                    "unknown op {op_name:?}; the ops are {}",
                    Op::NAMES.join(", ")
                ),
            });
        }
        let op: Op = match serde_json::from_value(Value::Object(fields)) {
            Ok(op) => op,
            Err(e) => {
                return Err(ProtocolError::bad_request(
                    Some(id),
                    format!("{op_name}: {e}"),
                ));
            }
        };
        if let Err(message) = op.validate() {
            return Err(ProtocolError::bad_request(
                Some(id),
                format!("{op_name}: {message}"),
            ));
        }
        Ok(Request { id, op })
    }

    /// The request as JSON bytes, ready to publish.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a request is plain data and always serializes")
    }
}

fn take_id(fields: &mut Map<String, Value>) -> Result<String, ProtocolError> {
    match fields.remove("id") {
        None => Err(ProtocolError::bad_request(None, "missing field `id`")),
        Some(Value::String(id)) => match validate::request_id(&id) {
            Ok(()) => Ok(id),
            Err(message) => Err(ProtocolError::bad_request(None, message)),
        },
        Some(_) => Err(ProtocolError::bad_request(None, "`id` must be a string")),
    }
}

/// Deserializing goes through the same checks as [`Request::from_value`], so a request read
/// back from the Raft log is exactly as valid as one read from the wire.
impl<'de> Deserialize<'de> for Request {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Request::from_value(value).map_err(serde::de::Error::custom)
    }
}
