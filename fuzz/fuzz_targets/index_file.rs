//! The side index decoder (`STORE/index/seg-N.idx`) over arbitrary bytes.
//!
//! Property: an index that decodes encodes to bytes that decode to the same index, and
//! encoding that again gives the same bytes.
#![no_main]

use capsule_index::sideindex::SegmentIndex;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    match SegmentIndex::decode(input) {
        Ok(idx) => {
            let bytes = idx.encode();
            let again = SegmentIndex::decode(&bytes)
                .unwrap_or_else(|e| panic!("re-encoded index does not decode: {e}"));
            assert_eq!(again, idx);
            assert_eq!(again.encode(), bytes);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
