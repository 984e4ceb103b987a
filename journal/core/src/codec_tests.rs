//! Record value versions 1 and 2 (spec/journal.md §4, §11): version 1 values written before
//! payload compression still decode and authenticate; version 2 round-trips payloads stored as
//! they are and compressed; a damaged or oversized compressed payload is a decode error, never a
//! panic nor a different payload that authenticates. Journals with both versions:
//! `journal/core/tests/record_versions.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::*;

const KEY: [u8; 32] = [7; 32];

// Two record values exactly as the last version-1 build (commit 4025168, before compression)
// wrote them: positions 1 and 14 of a journal built by `ctx hook claude ...` runs. D covers them;
// their MACs are under that journal's key, which is not kept here.
const V1_HOST_SESSION: &str = concat!(
    "435458520100000008010000686f6f6b2d63646434666339323839653039616136303737313161373962333366373437",
    "3233323738356430336132356134363661383035633464613730303730636163376374782e686f73742d73657373696f",
    "6e2e76316aef2b82c1303e540c20ea1b84de8e80f2a2b94849483caecaf9bc6b11241e50010000000000000001000000",
    "00000000e3374388eb610600590100000000000000000000000000000000000000000000000000000000000000000000",
    "73eb53a9a2591e75132a3a8dca5473c043be94ae0ff16bf5d4db16fe73a6abac991c05c8384e2007b843c745fe2d4c7f",
    "6014addda13c246f53459b3d4c6a07ae850100000cffffff9300000049ffffff000000007b22656e6465645f71756572",
    "795f72656673223a5b5d2c226576656e74223a2273657373696f6e2d7374617274222c22686f6f6b5f6576656e745f6e",
    "616d65223a2253657373696f6e5374617274222c22686f7374223a22636c61756465222c22696e7075745f6469676573",
    "74223a226563303333323737343334653732646237303363393232353130663034393430343933646232613232383231",
    "6533356635376338356164616636656130636237222c22736368656d61223a226374782e686f73742d73657373696f6e",
    "2e7631222c2273657373696f6e5f6964223a22636c617564653a67726f7774682d30222c22736f75726365223a227374",
    "6172747570222c22776f726b73706163655f646967657374223a22613462303537393365333664393163646139333130",
    "32336230383834373131623436653137356132303262323564613664626431313361633534366361633233227d",
);
const V1_BROKER_IDENTITY: &str = concat!(
    "4354585201000000f00000006374782d636f6e73656e742d62726f6b65722d6964656e746974796374782e636f6e7365",
    "6e742d62726f6b65722d6964656e746974792e76310000000000000077640ae0469cddadb3b8bcf5ebc2b9402500c51e",
    "fdd384301935ee8aac5794e901000000000000000e000000000000000000000000000000520000000000000000000000",
    "000000000000000000000000000000000000000000000000d60397caad394075737ffa898fcfb41ce896b094cc5e7376",
    "ddd54c19978852905f70844b45b64a7d02c3dd74b20e60822f4be01a90d5fa13f5ee385b777d492e9b00000024ffffff",
    "9e00000037ffffff000000007b2261756469656e6365223a226374782d6d616e616765642d7175657279222c22736368",
    "656d61223a226374782e696e7374616c6c2d636f6e73656e742d62726f6b65722d6964656e746974792d7631227d",
);

// The same host-session record as this build (record value version 2, zstd 1.6.0 level 3) wrote
// it: a value once written must keep decoding whatever zstd version later builds link.
const V2_HOST_SESSION: &str = concat!(
    "435458520200010008010000686f6f6b2d63646434666339323839653039616136303737313161373962333366373437",
    "3233323738356430336132356134363661383035633464613730303730636163376374782e686f73742d73657373696f",
    "6e2e76316aef2b82c1303e540c20ea1b84de8e80f2a2b94849483caecaf9bc6b11241e50010000000000000001000000",
    "00000000e3374388eb610600590100000000000000000000000000000000000000000000000000000000000000000000",
    "73eb53a9a2591e75132a3a8dca5473c043be94ae0ff16bf5d4db16fe73a6abac991c05c8384e2007b843c745fe2d4c7f",
    "6014addda13c246f53459b3d4c6a07ae850100000cffffff9300000049ffffff0000000028b52ffd605900dd0700d610",
    "35205067ec43c311e01a75511511f122948fa136331bc02f7645280388c9cc4ca8012e002a002e00aae89485822afa88",
    "7e96e51063a3864ea8a73c9ee848f952159dcf2b5e8d00004525f3d052007d34b0f8fbf36a108c61fc6a93dddee7ec56",
    "5a6e252629b6eb20a7f67cdb2f5ead2d7382ff06c79719251e470d7d8f5a0006fdb013f200c5851a9a882484a2988e66",
    "2e226450dc599482208f29634320988df8064a35b43d98fa11a6bd59025b07ca0b1b228bc166a5fc39d2cef66dda664d",
    "3db29e526d25497abc49b16b87ca39c2cfaeb1f4560d002a5ba599dd9d3122d41e8529037380d0300c36979c210c3b2f",
    "26aa88a2e614b81414",
);

// The same record as this build writes it (record value version 2, codec 2: zstd 1.6.0 level 3
// with the records dictionary): a value once written must keep decoding whatever zstd version
// later builds link.
const V2_DICT_HOST_SESSION: &str = concat!(
    "435458520200020008010000686f6f6b2d63646434666339323839653039616136303737313161373962333366373437",
    "3233323738356430336132356134363661383035633464613730303730636163376374782e686f73742d73657373696f",
    "6e2e76316aef2b82c1303e540c20ea1b84de8e80f2a2b94849483caecaf9bc6b11241e50010000000000000001000000",
    "00000000e3374388eb610600590100000000000000000000000000000000000000000000000000000000000000000000",
    "73eb53a9a2591e75132a3a8dca5473c043be94ae0ff16bf5d4db16fe73a6abac991c05c8384e2007b843c745fe2d4c7f",
    "6014addda13c246f53459b3d4c6a07ae850100000cffffff9300000049ffffff0000000028b52ffd634fe4db3359002d",
    "0400f3481577f438234e1493f855952fea25ed8dcc73cb287ed52233fd19d5b517525df4ccf5263d7a0f2e84a1871d3d",
    "689f901b3d5e3c996c9e3c53c6666e5fae91b0910e559a3539da2fb6060f77ed8e882982171c0c5f38430efc5361802a",
    "865eedaa6889e729c66aa40e0058411e272e98153a01f9ff58ee58824ee69ad94a949c5c0e8515",
);

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn stream() -> StreamId {
    StreamId::derive("codec.test", b"s").unwrap()
}

/// A JSON-like payload of about `len` bytes, compressible as the engine's records are.
fn json_payload(len: usize) -> Vec<u8> {
    let mut out = String::from("{\"actions\":[");
    let mut i = 0u64;
    while out.len() < len {
        out.push_str(&format!(
            "{{\"capability\":\"skill.{i}\",\"digest\":\"{:016x}{:016x}\",\"mode\":\"install\"}},",
            i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            i.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        ));
        i += 1;
    }
    out.truncate(len);
    out.into_bytes()
}

/// Bytes no codec shrinks (xorshift64*).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

/// Encodes `record` as revision 1, position 1 of [`stream`], with its real D and M under [`KEY`].
fn encode(record: &NewRecord) -> (Vec<u8>, Digest) {
    let digest = record_digest(
        &stream(),
        1,
        &record.event_id,
        &record.kind,
        record.occurred_at,
        &Digest::ZERO,
        &record.payload,
    );
    let mac = MacKey::new(&KEY).tag(1, &digest);
    let mut out = Vec::new();
    encode_record(
        &stream(),
        1,
        1,
        record,
        &Digest::ZERO,
        &digest,
        mac,
        &mut out,
    );
    (out, digest)
}

/// A version-1 value, as the last version-1 build wrote it (its `encode_record`, unchanged).
fn encode_v1(view: &RecordView<'_>) -> Vec<u8> {
    let record = NewRecord::new(view.event_id, view.kind, view.occurred_at, view.payload);
    let archived = archive_header(
        &view.stream,
        view.revision,
        view.position,
        &record,
        &view.previous_digest,
        &view.digest,
        view.mac,
    );
    let mut out = Vec::new();
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(archived.len() as u32).to_le_bytes());
    out.extend_from_slice(&archived);
    out.extend_from_slice(&record.payload);
    out
}

/// A value with the given prefix fields, a header declaring `payload_len` and `body` after it.
fn raw_value(version: u16, codec: u8, payload_len: usize, body: &[u8]) -> Vec<u8> {
    let record = NewRecord::new("e1", "k", Timestamp(7), vec![0u8; payload_len]);
    let archived = archive_header(
        &stream(),
        1,
        1,
        &record,
        &Digest::ZERO,
        &Digest::ZERO,
        [0; 32],
    );
    let mut out = Vec::new();
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.push(codec);
    out.push(0);
    out.extend_from_slice(&(archived.len() as u32).to_le_bytes());
    out.extend_from_slice(&archived);
    out.extend_from_slice(body);
    out
}

/// A codec-1 frame: no dictionary.
fn zstd_frame(payload: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(payload, ZSTD_LEVEL).unwrap()
}

/// A codec-2 frame: made with the records dictionary, naming its id.
fn dict_frame(payload: &[u8]) -> Vec<u8> {
    zstd::bulk::Compressor::with_dictionary(ZSTD_LEVEL, RECORDS_DICTIONARY)
        .unwrap()
        .compress(payload)
        .unwrap()
}

/// Where the stored payload of a value starts.
fn body_offset(value: &[u8]) -> usize {
    RECORD_PREFIX_BYTES + u32::from_le_bytes(value[8..12].try_into().unwrap()) as usize
}

/// Rewrites the content size a zstd frame declares, in a field of the same width
/// (RFC 8878 §3.1.1.1: descriptor, window descriptor, dictionary id, frame content size).
fn set_declared_len(frame: &mut [u8], len: u64) {
    let descriptor = frame[4];
    let single_segment = descriptor & 0x20 != 0;
    let dict_bytes = [0, 1, 2, 4][usize::from(descriptor & 0x03)];
    let at = 5 + usize::from(!single_segment) + dict_bytes;
    let (width, field) = match descriptor >> 6 {
        0 if single_segment => (1, len),
        1 => (2, len - 256),
        2 => (4, len),
        3 => (8, len),
        _ => panic!("the frame declares no content size"),
    };
    frame[at..at + width].copy_from_slice(&field.to_le_bytes()[..width]);
}

fn decode_error(value: &[u8]) -> &'static str {
    let mut scratch = AlignedVec::new();
    match decode_record(value, &mut scratch) {
        Ok(view) => panic!("decoded to a record of {} bytes", view.payload.len()),
        Err(reason) => reason,
    }
}

#[test]
fn version_1_values_of_the_last_version_1_build_decode_and_re_encode_byte_for_byte() {
    for (hex, event_id, digest, payload_len) in [
        (
            V1_HOST_SESSION,
            "hook-cdd4fc9289e09aa607711a79b33f747232785d03a25a466a805c4da70070cac7",
            "73eb53a9a2591e75132a3a8dca5473c043be94ae0ff16bf5d4db16fe73a6abac",
            345,
        ),
        (
            V1_BROKER_IDENTITY,
            "ctx-consent-broker-identity",
            "d60397caad394075737ffa898fcfb41ce896b094cc5e7376ddd54c1997885290",
            82,
        ),
    ] {
        let value = unhex(hex);
        assert_eq!(&value[4..8], &[1, 0, 0, 0], "version 1, reserved 0");
        // The public decoder checks D.
        let record = decode_record_value(&value).unwrap();
        assert_eq!(record.event_id, event_id);
        assert_eq!(record.digest.to_hex(), digest);
        assert_eq!(record.payload.len(), payload_len);
        assert!(record.payload.starts_with(b"{\"") && record.payload.ends_with(b"}"));
        // The payload is borrowed in place, and the test's version-1 encoder is that build's.
        let mut scratch = AlignedVec::new();
        let view = decode_record(&value, &mut scratch).unwrap();
        assert!(value.ends_with(view.payload));
        assert_eq!(encode_v1(&view), value);
    }
}

#[test]
fn a_value_of_this_build_is_version_2_and_decodes_to_the_same_record() {
    // The host-session record of the fixture, re-encoded now: 345 bytes of JSON are compressed.
    let old = decode_record_value(&unhex(V1_HOST_SESSION)).unwrap();
    let v1 = unhex(V1_HOST_SESSION);
    let mut scratch = AlignedVec::new();
    let view = decode_record(&v1, &mut scratch).unwrap();
    let record = NewRecord::new(
        old.event_id.clone(),
        old.kind.clone(),
        old.occurred_at,
        old.payload.clone(),
    );
    let mut value = Vec::new();
    encode_record(
        &old.stream,
        old.revision,
        old.position,
        &record,
        &old.previous_digest,
        &old.digest,
        view.mac,
        &mut value,
    );
    assert_eq!(&value[4..8], &[2, 0, CODEC_ZSTD_DICT, 0]);
    assert!(value.len() < v1.len());
    assert_eq!(decode_record_value(&value).unwrap(), old);
    // A version-2 value of an earlier build (codec 1, no dictionary) decodes to the same record.
    let committed = unhex(V2_HOST_SESSION);
    assert_eq!(&committed[4..8], &[2, 0, CODEC_ZSTD, 0]);
    assert_eq!(decode_record_value(&committed).unwrap(), old);
    let view = decode_record(&committed, &mut scratch).unwrap();
    assert_eq!(
        view.mac,
        decode_record(&v1, &mut AlignedVec::new()).unwrap().mac
    );
    // And a codec-2 value as this build first wrote it.
    let committed = unhex(V2_DICT_HOST_SESSION);
    assert_eq!(&committed[4..8], &[2, 0, CODEC_ZSTD_DICT, 0]);
    assert_eq!(decode_record_value(&committed).unwrap(), old);
}

#[test]
fn version_2_round_trips_compressible_incompressible_and_short_payloads() {
    let mac = MacKey::new(&KEY);
    let cases: Vec<(Vec<u8>, u8)> = vec![
        (Vec::new(), CODEC_STORED),
        (b"{}".to_vec(), CODEC_STORED),
        // Compressible, but shorter than the threshold.
        (vec![b'a'; PAYLOAD_COMPRESS_MIN_BYTES - 1], CODEC_STORED),
        (vec![b'a'; PAYLOAD_COMPRESS_MIN_BYTES], CODEC_ZSTD_DICT),
        (json_payload(5_000), CODEC_ZSTD_DICT),
        (json_payload(PAYLOAD_MAX_BYTES), CODEC_ZSTD_DICT),
        // Incompressible: a frame would be longer than the payload.
        (noise(200, 1), CODEC_STORED),
        (noise(64 * 1024, 2), CODEC_STORED),
    ];
    let mut scratch = AlignedVec::new();
    for (payload, codec) in cases {
        let record = NewRecord::new("event-1", "codec.kind", Timestamp(-3), payload.clone());
        let (value, digest) = encode(&record);
        assert_eq!(&value[4..6], &2u16.to_le_bytes());
        assert_eq!(value[6], codec, "codec of a {}-byte payload", payload.len());
        assert_eq!(value[7], 0);
        let stored = value.len() - body_offset(&value);
        if codec == CODEC_ZSTD_DICT {
            assert!(stored < payload.len());
        } else {
            assert_eq!(stored, payload.len());
        }
        let view = decode_record(&value, &mut scratch).unwrap();
        assert_eq!(view.payload, payload.as_slice());
        assert_eq!(view.digest, digest);
        assert_eq!((view.event_id, view.kind), ("event-1", "codec.kind"));
        assert_eq!(authenticate(&view, &mac), Ok(()));
        // The scratch buffer is reused: a stored payload after a compressed one, and back.
        let again = decode_record_value(&value).unwrap();
        assert_eq!(again.payload, payload);
    }
}

#[test]
fn the_prefix_codec_and_reserved_bytes_are_checked() {
    let (value, _) = encode(&NewRecord::new("e", "k", Timestamp(0), json_payload(1000)));
    assert_eq!(value[6], CODEC_ZSTD_DICT);
    for (at, byte, reason) in [
        (6, 3, "record payload codec or reserved byte is unknown"),
        (6, 0xff, "record payload codec or reserved byte is unknown"),
        (7, 1, "record payload codec or reserved byte is unknown"),
        (4, 3, "record format version is unknown"),
        (4, 0, "record format version is unknown"),
    ] {
        let mut bad = value.clone();
        bad[at] = byte;
        assert_eq!(decode_error(&bad), reason, "byte {at} = {byte}");
    }
    // Version 1 knows no codec: a version-1 prefix with a codec byte is refused.
    let v1 = unhex(V1_HOST_SESSION);
    for at in [6, 7] {
        let mut bad = v1.clone();
        bad[at] = 1;
        assert_eq!(
            decode_error(&bad),
            "record payload codec or reserved byte is unknown"
        );
    }
    // A frame made with the dictionary marked as codec 1 names a dictionary codec 1 has not.
    let mut bad = value.clone();
    bad[6] = CODEC_ZSTD;
    assert_eq!(
        decode_error(&bad),
        "compressed payload names a dictionary its codec has not"
    );
    // A compressed payload marked as stored is a length mismatch.
    let mut bad = value.clone();
    bad[6] = CODEC_STORED;
    assert_eq!(
        decode_error(&bad),
        "payload length disagrees with the header"
    );
}

#[test]
fn a_damaged_compressed_payload_is_refused_or_fails_its_digest_never_panics() {
    let mac = MacKey::new(&KEY);
    let payload = json_payload(3_000);
    let (value, _) = encode(&NewRecord::new("e", "k", Timestamp(0), payload.clone()));
    let body = body_offset(&value);
    assert_eq!(value[6], CODEC_ZSTD_DICT);
    let mut scratch = AlignedVec::new();
    let (mut refused, mut digest_failures, mut same) = (0, 0, 0);
    // Every byte of the frame, each bit in turn.
    for at in body..value.len() {
        for bit in 0..8 {
            let mut bad = value.clone();
            bad[at] ^= 1 << bit;
            match decode_record(&bad, &mut scratch) {
                Err(_) => refused += 1,
                // The stored form is not unique: zstd ignores some bits (the frame descriptor's
                // unused bit, slack in entropy tables: 20 of 6128 flips here), and such an edit
                // is the same record.
                Ok(view) if view.payload == payload.as_slice() => {
                    assert_eq!(authenticate(&view, &mac), Ok(()));
                    same += 1;
                }
                Ok(view) => {
                    assert_eq!(
                        authenticate(&view, &mac),
                        Err(Integrity::Digest),
                        "flip at {at} bit {bit}"
                    );
                    digest_failures += 1;
                }
            }
        }
    }
    assert!(refused > 0 && digest_failures > 0);
    assert_eq!(refused + digest_failures + same, 8 * (value.len() - body));
    // Truncated, extended, doubled, or emptied frames are refused by structure.
    let frame = value[body..].to_vec();
    let head = value[..body].to_vec();
    let with = |stored: &[u8]| [head.as_slice(), stored].concat();
    assert_eq!(
        decode_error(&with(&frame[..frame.len() - 1])),
        "compressed payload is not exactly one zstd frame"
    );
    assert_eq!(
        decode_error(&with(&[frame.as_slice(), &[0]].concat())),
        "compressed payload is not exactly one zstd frame"
    );
    assert_eq!(
        decode_error(&with(&[frame.as_slice(), frame.as_slice()].concat())),
        "compressed payload is not exactly one zstd frame"
    );
    assert_eq!(
        decode_error(&with(&[])),
        "compressed payload is not exactly one zstd frame"
    );
}

#[test]
fn a_different_payload_under_an_intact_frame_fails_the_digest() {
    // Someone who can write the file recompresses another payload of the same length: it
    // decodes, and D (over the uncompressed payload) catches it.
    let payload = json_payload(3_000);
    let (value, _) = encode(&NewRecord::new("e", "k", Timestamp(0), payload.clone()));
    let mut other = payload.clone();
    other[1_500] ^= 0x01;
    let forged = [&value[..body_offset(&value)], &dict_frame(&other)].concat();
    let mut scratch = AlignedVec::new();
    let view = decode_record(&forged, &mut scratch).unwrap();
    assert_eq!(view.payload, other.as_slice());
    assert_eq!(
        authenticate(&view, &MacKey::new(&KEY)),
        Err(Integrity::Digest)
    );
    assert_eq!(
        decode_record_value(&forged).unwrap_err().reason,
        "the record digest does not match its content"
    );
    // And the right payload under another key fails the MAC.
    let view = decode_record(&value, &mut scratch).unwrap();
    assert_eq!(
        authenticate(&view, &MacKey::new(&[8; 32])),
        Err(Integrity::Mac)
    );
}

#[test]
fn a_frame_that_inflates_beyond_the_header_length_is_refused() {
    let payload = json_payload(2_000);
    let frame = zstd_frame(&payload);
    // The frame declares 2000 bytes, the header 1999: refused before decompressing.
    assert_eq!(
        decode_error(&raw_value(2, CODEC_ZSTD, 1_999, &frame)),
        "payload length disagrees with the header"
    );
    // The frame lies too, declaring 1999: zstd stops at the 1999-byte destination.
    let mut lying = frame.clone();
    set_declared_len(&mut lying, 1_999);
    assert_eq!(
        decode_error(&raw_value(2, CODEC_ZSTD, 1_999, &lying)),
        "compressed payload does not decompress to its length"
    );
    // A frame that declares more than it holds is refused as well.
    let mut short = frame.clone();
    set_declared_len(&mut short, 2_001);
    assert_eq!(
        decode_error(&raw_value(2, CODEC_ZSTD, 2_001, &short)),
        "compressed payload does not decompress to its length"
    );
    // The honest pair decodes.
    let mut scratch = AlignedVec::new();
    let honest = raw_value(2, CODEC_ZSTD, 2_000, &frame);
    let view = decode_record(&honest, &mut scratch).unwrap();
    assert_eq!(view.payload, payload.as_slice());
}

#[test]
fn declared_lengths_past_the_payload_limit_or_not_past_the_frame_are_refused() {
    // A frame of PAYLOAD_MAX_BYTES + 1 bytes: nothing is allocated for it.
    let big = zstd_frame(&vec![b'x'; PAYLOAD_MAX_BYTES + 1]);
    assert_eq!(
        decode_error(&raw_value(2, CODEC_ZSTD, PAYLOAD_MAX_BYTES + 1, &big)),
        "compressed payload declares a length out of range"
    );
    // A frame that does not shrink its payload is not a valid stored form.
    let incompressible = noise(300, 9);
    let frame = zstd_frame(&incompressible);
    assert!(frame.len() > incompressible.len());
    assert_eq!(
        decode_error(&raw_value(2, CODEC_ZSTD, 300, &frame)),
        "compressed payload is not shorter than its length"
    );
    // A frame without a content size.
    let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL).unwrap();
    compressor
        .set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))
        .unwrap();
    let payload = json_payload(1_000);
    let unsized_frame = compressor.compress(&payload).unwrap();
    assert_eq!(
        decode_error(&raw_value(2, CODEC_ZSTD, 1_000, &unsized_frame)),
        "compressed payload does not declare its length"
    );
}

#[test]
fn the_records_dictionary_is_the_one_the_format_names() {
    // spec/journal.md §4 R9 pins these bytes: frames written with them must decode forever.
    assert_eq!(RECORDS_DICTIONARY.len(), 32_768);
    assert_eq!(
        Sha256::digest(RECORDS_DICTIONARY)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        "5beae8d38e7f166eca49fd71e4626121751eabaef3ad4822f65e71efd4a3c4f2"
    );
    assert_eq!(
        zstd::zstd_safe::get_dict_id_from_dict(RECORDS_DICTIONARY).map(|id| id.get()),
        Some(RECORDS_DICTIONARY_ID)
    );
}

#[test]
fn codec_2_needs_a_frame_that_names_the_records_dictionary_and_codec_1_one_that_names_none() {
    let payload = json_payload(2_000);
    let mut scratch = AlignedVec::new();
    // The honest pairs decode to the payload.
    for (codec, frame) in [
        (CODEC_ZSTD, zstd_frame(&payload)),
        (CODEC_ZSTD_DICT, dict_frame(&payload)),
    ] {
        let value = raw_value(2, codec, 2_000, &frame);
        assert_eq!(
            decode_record(&value, &mut scratch).unwrap().payload,
            payload.as_slice()
        );
    }
    // A plain frame under codec 2.
    assert_eq!(
        decode_error(&raw_value(2, CODEC_ZSTD_DICT, 2_000, &zstd_frame(&payload))),
        "compressed payload does not name the records dictionary"
    );
    // A frame that names another dictionary under codec 2: its 4-byte dictionary id field
    // (RFC 8878 §3.1.1.1.1: descriptor bits 0-1 = 3) rewritten.
    let mut frame = dict_frame(&payload);
    assert_eq!(frame[4] & 0x03, 3);
    let at = 5 + usize::from(frame[4] & 0x20 == 0);
    assert_eq!(frame[at..at + 4], RECORDS_DICTIONARY_ID.to_le_bytes());
    frame[at..at + 4].copy_from_slice(&(RECORDS_DICTIONARY_ID + 1).to_le_bytes());
    assert_eq!(
        decode_error(&raw_value(2, CODEC_ZSTD_DICT, 2_000, &frame)),
        "compressed payload does not name the records dictionary"
    );
    // The dictionary's frame under codec 1.
    assert_eq!(
        decode_error(&raw_value(2, CODEC_ZSTD, 2_000, &dict_frame(&payload))),
        "compressed payload names a dictionary its codec has not"
    );
    // Version 1 knows neither codec.
    assert_eq!(
        decode_error(&raw_value(1, CODEC_ZSTD_DICT, 2_000, &dict_frame(&payload))),
        "record payload codec or reserved byte is unknown"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// encode → decode is the identity on the record, whatever the payload, and the stored form
    /// is never longer than the payload itself.
    #[test]
    fn encode_then_decode_is_the_identity(
        payload in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..2_000),
            proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'"'), Just(b'{'), any::<u8>()], 0..5_000),
            (1usize..40_000).prop_map(json_payload),
        ],
        event_id in "[!-~]{1,128}",
        kind in "[!-~]{1,64}",
        at in any::<i64>(),
    ) {
        let record = NewRecord::new(event_id.clone(), kind.clone(), Timestamp(at), payload.clone());
        let (value, digest) = encode(&record);
        prop_assert!(value.len() - body_offset(&value) <= payload.len());
        prop_assert_eq!(value[6] == CODEC_ZSTD_DICT, value.len() - body_offset(&value) < payload.len());
        let mut scratch = AlignedVec::new();
        let view = decode_record(&value, &mut scratch).unwrap();
        prop_assert_eq!(view.payload, payload.as_slice());
        prop_assert_eq!(view.event_id, event_id.as_str());
        prop_assert_eq!(view.kind, kind.as_str());
        prop_assert_eq!(view.occurred_at, Timestamp(at));
        prop_assert_eq!(view.digest, digest);
        prop_assert_eq!(authenticate(&view, &MacKey::new(&KEY)), Ok(()));
    }

    /// Edits to a compressed value never panic, and whatever still decodes and authenticates is
    /// the original record.
    #[test]
    fn edited_compressed_values_never_decode_to_another_authentic_record(
        edits in proptest::collection::vec((any::<u16>(), 1u8..=255), 1..6),
        cut in proptest::option::of(any::<u16>()),
    ) {
        let payload = json_payload(1_500);
        let (mut value, _) = encode(&NewRecord::new("e", "k", Timestamp(0), payload.clone()));
        for (at, xor) in edits {
            let at = usize::from(at) % value.len();
            value[at] ^= xor;
        }
        if let Some(cut) = cut {
            value.truncate(usize::from(cut) % (value.len() + 1));
        }
        let mut scratch = AlignedVec::new();
        if let Ok(view) = decode_record(&value, &mut scratch)
            && authenticate(&view, &MacKey::new(&KEY)).is_ok()
        {
            prop_assert_eq!(view.payload, payload.as_slice());
        }
    }
}
