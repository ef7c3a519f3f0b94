//! libFuzzer's entry to `fuzz_targets::topology_file`, whose doc says what the input is and what must
//! hold for any input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_targets::topology_file::check(data));
