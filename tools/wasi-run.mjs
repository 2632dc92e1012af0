#!/usr/bin/env node
// Runs a wasm32-wasip1 program (a `cargo test` binary) under node's WASI.
// Used as CARGO_TARGET_WASM32_WASIP1_RUNNER:
//   node tools/wasi-run.mjs path/to/test.wasm [args...]
//
// The program gets its argv and the RUST_* / PROPTEST_* environment variables,
// and no preopened directories: meshlimit-core does no I/O, so it needs no
// file system access. Exits with the program's exit code; a trap (for example
// a panic, which aborts on this target) exits 101 like a failed Rust test.

import { readFile } from "node:fs/promises";
import process from "node:process";

// node:wasi prints an ExperimentalWarning when loaded: drop that one, keep the rest.
// (Static imports are hoisted, so node:wasi is imported dynamically below.)
process.removeAllListeners("warning");
process.on("warning", (warning) => {
  if (warning.name !== "ExperimentalWarning") {
    process.stderr.write(`${warning.name}: ${warning.message}\n`);
  }
});

const { WASI } = await import("node:wasi");

const [wasmPath, ...args] = process.argv.slice(2);
if (!wasmPath) {
  process.stderr.write("usage: wasi-run.mjs PROGRAM.wasm [ARGS...]\n");
  process.exit(64);
}

const env = Object.fromEntries(
  Object.entries(process.env).filter(([k]) => /^(RUST_|PROPTEST_)/.test(k)),
);

async function run(argv) {
  const wasi = new WASI({
    version: "preview1",
    args: [wasmPath, ...argv],
    env,
    preopens: {},
    returnOnExit: true,
  });
  try {
    const module = await WebAssembly.compile(await readFile(wasmPath));
    const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
    return { code: wasi.start(instance) };
  } catch (err) {
    return { code: 101, trap: err };
  }
}

let { code, trap } = await run(args);
if (trap) {
  process.stderr.write(`wasi-run: ${wasmPath} trapped: ${trap}\n`);
  // panic=abort on this target: libtest's captured output, panic message
  // included, dies with the trap. Run the test binary once more without
  // capturing so the log shows which test panicked and why.
  const isTestBinary = /[\\/]deps[\\/][^\\/]+\.wasm$/.test(wasmPath);
  if (isTestBinary && !args.includes("--nocapture")) {
    process.stderr.write("wasi-run: re-running with --nocapture --test-threads=1 to show the panic:\n");
    await run([...args, "--nocapture", "--test-threads=1"]);
  }
}
process.exit(code);
