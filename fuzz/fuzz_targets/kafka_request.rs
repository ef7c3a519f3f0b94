//! libFuzzer's entry to `fuzz_targets::kafka_request`, whose doc says what the input is and what must
//! hold for any input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_targets::kafka_request::check(data));
