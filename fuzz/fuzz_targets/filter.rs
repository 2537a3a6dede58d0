//! The filter parser over arbitrary text.
//!
//! Properties: the canonical form (`Display`) of a parsed filter parses again, to a filter
//! with the same canonical form (a fixed point); an error displays (message and caret)
//! without panicking, and its caret lies within the input.
#![no_main]

use capsule_query::Filter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    match Filter::parse(text) {
        Ok(f) => {
            let canon = f.to_string();
            let again = Filter::parse(&canon).unwrap_or_else(|e| {
                panic!("canonical form {canon:?} of {text:?} does not parse: {e}")
            });
            assert_eq!(
                again.to_string(),
                canon,
                "canonical form of {text:?} is not a fixed point"
            );
            assert_eq!(again.is_all(), f.is_all());
        }
        Err(e) => {
            let _ = e.to_string();
            let _ = e.message();
            let _ = format!("{e:?}");
            assert!(e.pos <= e.input.len(), "caret past the input: {e:?}");
        }
    }
});
