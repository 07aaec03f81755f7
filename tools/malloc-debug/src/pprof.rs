//! pprof output (profile.proto, gzipped), readable by `go tool pprof` and speedscope. The
//! messages are few and flat, so they are written field by field with prost's wire encoders
//! rather than generated code (no protoc or derive macros in the build).
//!
//! Sample types: `inuse_objects`/count and `inuse_space`/bytes (the names heap profiles use).
//! One location per logical frame (inlined frames get their own), each with one line.

use std::collections::HashMap;
use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::encoding::{WireType, encode_key, encode_varint};

use crate::profile::Profile;
use crate::{Error, Result};

// profile.proto field numbers.
const PROFILE_SAMPLE_TYPE: u32 = 1;
const PROFILE_SAMPLE: u32 = 2;
const PROFILE_LOCATION: u32 = 4;
const PROFILE_FUNCTION: u32 = 5;
const PROFILE_STRING_TABLE: u32 = 6;
const PROFILE_DEFAULT_SAMPLE_TYPE: u32 = 14;
const VALUE_TYPE_TYPE: u32 = 1;
const VALUE_TYPE_UNIT: u32 = 2;
const SAMPLE_LOCATION_ID: u32 = 1;
const SAMPLE_VALUE: u32 = 2;
const SAMPLE_LABEL: u32 = 3;
const LABEL_KEY: u32 = 1;
const LABEL_STR: u32 = 2;
const LOCATION_ID: u32 = 1;
const LOCATION_ADDRESS: u32 = 3;
const LOCATION_LINE: u32 = 4;
const LINE_FUNCTION_ID: u32 = 1;
const LINE_LINE: u32 = 2;
const FUNCTION_ID: u32 = 1;
const FUNCTION_NAME: u32 = 2;
const FUNCTION_SYSTEM_NAME: u32 = 3;
const FUNCTION_FILENAME: u32 = 4;

fn varint(buf: &mut Vec<u8>, tag: u32, value: u64) {
    encode_key(tag, WireType::Varint, buf);
    encode_varint(value, buf);
}

fn bytes(buf: &mut Vec<u8>, tag: u32, value: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(value.len() as u64, buf);
    buf.extend_from_slice(value);
}

fn packed(buf: &mut Vec<u8>, tag: u32, values: &[u64]) {
    let mut inner = Vec::new();
    for &v in values {
        encode_varint(v, &mut inner);
    }
    bytes(buf, tag, &inner);
}

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        self.table.push(s.to_string());
        let i = self.table.len() as u64 - 1;
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The uncompressed profile.proto message.
pub fn encode(profile: &Profile) -> Vec<u8> {
    let mut strings = Strings::default();
    strings.id(""); // string_table[0] must be "".
    let mut out = Vec::new();
    for (kind, unit) in [("inuse_objects", "count"), ("inuse_space", "bytes")] {
        let mut vt = Vec::new();
        varint(&mut vt, VALUE_TYPE_TYPE, strings.id(kind));
        varint(&mut vt, VALUE_TYPE_UNIT, strings.id(unit));
        bytes(&mut out, PROFILE_SAMPLE_TYPE, &vt);
    }
    let zygote_key = strings.id("heap");
    let (app, zygote) = (strings.id("app"), strings.id("zygote"));
    for s in &profile.samples {
        let mut m = Vec::new();
        // Location ids are frame ids + 1 (0 is invalid).
        let ids: Vec<u64> = s.stack.iter().map(|&f| f as u64 + 1).collect();
        packed(&mut m, SAMPLE_LOCATION_ID, &ids);
        packed(&mut m, SAMPLE_VALUE, &[s.count, s.bytes]);
        let mut label = Vec::new();
        varint(&mut label, LABEL_KEY, zygote_key);
        varint(&mut label, LABEL_STR, if s.zygote { zygote } else { app });
        bytes(&mut m, SAMPLE_LABEL, &label);
        bytes(&mut out, PROFILE_SAMPLE, &m);
    }
    let mut functions: HashMap<(String, Option<String>), u64> = HashMap::new();
    let mut function_msgs = Vec::new();
    for (i, frame) in profile.frames.iter().enumerate() {
        let key = (frame.function.clone(), frame.file.clone());
        let next = functions.len() as u64 + 1;
        let function_id = *functions.entry(key).or_insert_with(|| {
            let mut f = Vec::new();
            varint(&mut f, FUNCTION_ID, next);
            let name = strings.id(&frame.function);
            varint(&mut f, FUNCTION_NAME, name);
            varint(&mut f, FUNCTION_SYSTEM_NAME, name);
            let file = frame.file.as_deref().unwrap_or(&frame.module);
            varint(&mut f, FUNCTION_FILENAME, strings.id(file));
            function_msgs.push(f);
            next
        });
        let mut line = Vec::new();
        varint(&mut line, LINE_FUNCTION_ID, function_id);
        if let Some(l) = frame.line {
            varint(&mut line, LINE_LINE, l as u64);
        }
        let mut loc = Vec::new();
        varint(&mut loc, LOCATION_ID, i as u64 + 1);
        varint(&mut loc, LOCATION_ADDRESS, frame.address);
        bytes(&mut loc, LOCATION_LINE, &line);
        bytes(&mut out, PROFILE_LOCATION, &loc);
    }
    for f in &function_msgs {
        bytes(&mut out, PROFILE_FUNCTION, f);
    }
    let default_type = strings.id("inuse_space");
    for s in &strings.table {
        bytes(&mut out, PROFILE_STRING_TABLE, s.as_bytes());
    }
    varint(&mut out, PROFILE_DEFAULT_SAMPLE_TYPE, default_type);
    out
}

pub fn encode_gzip(profile: &Profile) -> Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&encode(profile))
        .and_then(|_| gz.finish())
        .map_err(|e| Error(format!("gzip: {e}")))
}
