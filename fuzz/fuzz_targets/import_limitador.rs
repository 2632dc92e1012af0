#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| meshlimit_fuzz_checks::import_limitador(data));
