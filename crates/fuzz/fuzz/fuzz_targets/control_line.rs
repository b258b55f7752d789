#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| netsched_fuzz::targets::control_line(data));
