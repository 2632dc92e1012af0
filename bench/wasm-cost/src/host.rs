//! A proxy-wasm host (ABI 0.2.1) over the wasmi interpreter, in memory: just
//! enough of what Envoy gives a filter for the request path and its calls to
//! the agent. Every host call is tallied by name; what Envoy does inside one
//! (and what it costs there) is not modelled, only that it was asked.

use std::collections::{BTreeMap, HashMap, VecDeque};

use wasmi::{Caller, Engine, Error, Extern, FuncType, Linker, Memory, Val, ValType};

/// proxy-wasm statuses the filter reads.
const OK: i32 = 0;
const NOT_FOUND: i32 = 1;
const EMPTY: i32 = 7;
const CAS_MISMATCH: i32 = 8;

/// The header maps the filter reads and writes (proxy-wasm `MapType`).
const REQUEST_HEADERS: i32 = 0;
const RESPONSE_HEADERS: i32 = 2;
const CALL_RESPONSE_HEADERS: i32 = 6;

/// The buffers the filter reads (proxy-wasm `BufferType`).
const CALL_RESPONSE_BODY: i32 = 4;
const VM_CONFIGURATION: i32 = 6;
const PLUGIN_CONFIGURATION: i32 = 7;

/// One HTTP call the module dispatched.
#[derive(Debug, Clone)]
pub struct Call {
    pub token: u32,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Call {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Everything the host holds for one VM.
#[derive(Debug, Default)]
pub struct State {
    /// Unix time, ns; moved by the driver, not by looking.
    pub now_ns: u64,
    env: Vec<(String, String)>,
    plugin_configuration: Vec<u8>,
    shared: HashMap<String, (Vec<u8>, u32)>,
    queues: Vec<(String, VecDeque<Vec<u8>>)>,
    /// Queues enqueued to since the driver last looked.
    pub woken: Vec<u32>,
    pub request_headers: Vec<(String, String)>,
    pub response_headers: Vec<(String, String)>,
    /// Calls dispatched and not yet taken by the driver.
    pub calls: Vec<Call>,
    next_token: u32,
    /// The answer the module reads for the call being answered.
    pub call_response: (Vec<(String, String)>, Vec<u8>),
    /// The status of the last local reply.
    pub local_reply: Option<i32>,
    /// Metrics the module defined (their values are not kept).
    metrics: usize,
    /// Host calls made, by name.
    pub tally: BTreeMap<String, u64>,
    /// The fuel left at each `cp:<label>` the module logged, and at each host
    /// call (labelled `→ name`).
    pub checkpoints: Vec<(String, u64)>,
    /// What the module logged at warning or above (a misconfigured run shows here).
    pub warnings: Vec<String>,
}

impl State {
    /// A VM whose clock reads `now_ns`, with `env` in its environment and
    /// `plugin_configuration` as the plugin's.
    pub fn new(now_ns: u64, env: Vec<(String, String)>, plugin_configuration: &str) -> State {
        State {
            now_ns,
            env,
            plugin_configuration: plugin_configuration.as_bytes().to_vec(),
            ..State::default()
        }
    }
}

impl State {
    /// The shared-data entries whose key starts with `prefix`: how many, and
    /// the bytes of their keys and values together.
    pub fn shared_bytes(&self, prefix: &str) -> (usize, usize) {
        self.shared
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .fold((0, 0), |(n, b), (k, (v, _))| (n + 1, b + k.len() + v.len()))
    }
}

/// A linker defining every import of a proxy-wasm module built for
/// wasm32-wasip1, over [`State`].
pub fn linker(engine: &Engine, module: &wasmi::Module) -> Result<Linker<State>, Error> {
    let mut linker = Linker::new(engine);
    for import in module.imports() {
        let Some(ty) = import.ty().func().cloned() else {
            return Err(Error::new(format!(
                "import {} is not a function",
                import.name()
            )));
        };
        let name = import.name().to_string();
        let module_name = import.module().to_string();
        let f = move |mut caller: Caller<'_, State>, args: &[Val], out: &mut [Val]| {
            *caller.data_mut().tally.entry(name.clone()).or_insert(0) += 1;
            if name != "proxy_log" {
                // A host call is a checkpoint too: `--checkpoints` lists the
                // request's calls in order, each with the work before it.
                let fuel = caller.get_fuel().unwrap_or(0);
                caller
                    .data_mut()
                    .checkpoints
                    .push((format!("→ {name}"), fuel));
            }
            let status = call(&mut caller, &name, args)?;
            if let Some(slot) = out.first_mut() {
                *slot = match slot {
                    Val::I64(_) => Val::I64(i64::from(status)),
                    _ => Val::I32(status),
                };
            }
            Ok(())
        };
        define(&mut linker, &module_name, import.name(), ty, f)?;
    }
    Ok(linker)
}

fn define(
    linker: &mut Linker<State>,
    module: &str,
    name: &str,
    ty: FuncType,
    f: impl Fn(Caller<'_, State>, &[Val], &mut [Val]) -> Result<(), Error> + Send + Sync + 'static,
) -> Result<(), Error> {
    if ty.results().len() > 1
        || ty
            .results()
            .iter()
            .any(|t| !matches!(t, ValType::I32 | ValType::I64))
    {
        return Err(Error::new(format!(
            "import {module}.{name}: unexpected results"
        )));
    }
    linker
        .func_new(module, name, ty, f)
        .map(|_| ())
        .map_err(|e| Error::new(e.to_string()))
}

fn i32_at(args: &[Val], i: usize) -> i32 {
    match args.get(i) {
        Some(Val::I32(v)) => *v,
        _ => 0,
    }
}

/// An argument that is a pointer or a size.
fn u_at(args: &[Val], i: usize) -> usize {
    usize::try_from(u32::from_ne_bytes(i32_at(args, i).to_ne_bytes())).unwrap_or(0)
}

fn memory(caller: &Caller<'_, State>) -> Result<Memory, Error> {
    caller
        .get_export("memory")
        .and_then(Extern::into_memory)
        .ok_or_else(|| Error::new("no memory export"))
}

fn read(caller: &Caller<'_, State>, ptr: usize, len: usize) -> Result<Vec<u8>, Error> {
    let mut buf = vec![0; len];
    memory(caller)?
        .read(caller, ptr, &mut buf)
        .map_err(|e| Error::new(e.to_string()))?;
    Ok(buf)
}

fn read_str(caller: &Caller<'_, State>, ptr: usize, len: usize) -> Result<String, Error> {
    Ok(String::from_utf8_lossy(&read(caller, ptr, len)?).into_owned())
}

fn write(caller: &mut Caller<'_, State>, ptr: usize, bytes: &[u8]) -> Result<(), Error> {
    memory(caller)?
        .write(caller, ptr, bytes)
        .map_err(|e| Error::new(e.to_string()))
}

fn write_u32(caller: &mut Caller<'_, State>, ptr: usize, v: usize) -> Result<(), Error> {
    let v = u32::try_from(v).map_err(|_| Error::new("value over u32"))?;
    write(caller, ptr, &v.to_le_bytes())
}

/// Hands `bytes` to the module the proxy-wasm way: memory from its own
/// allocator, the pointer and size written where it asked.
fn give(
    caller: &mut Caller<'_, State>,
    bytes: &[u8],
    ptr_out: usize,
    size_out: usize,
) -> Result<(), Error> {
    let alloc = caller
        .get_export("proxy_on_memory_allocate")
        .and_then(Extern::into_func)
        .ok_or_else(|| Error::new("no proxy_on_memory_allocate"))?
        .typed::<i32, i32>(&*caller)?;
    let len = i32::try_from(bytes.len()).map_err(|_| Error::new("buffer over i32"))?;
    let ptr = alloc.call(&mut *caller, len)?;
    let ptr = usize::try_from(u32::from_ne_bytes(ptr.to_ne_bytes())).unwrap_or(0);
    write(caller, ptr, bytes)?;
    write_u32(caller, ptr_out, ptr)?;
    write_u32(caller, size_out, bytes.len())
}

/// A header map as proxy-wasm serializes it: the count, each pair's sizes,
/// then each name and value NUL-terminated.
pub fn serialize_map(map: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&u32::try_from(map.len()).unwrap_or(0).to_le_bytes());
    for (n, v) in map {
        out.extend_from_slice(&u32::try_from(n.len()).unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&u32::try_from(v.len()).unwrap_or(0).to_le_bytes());
    }
    for (n, v) in map {
        out.extend_from_slice(n.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

fn deserialize_map(bytes: &[u8]) -> Vec<(String, String)> {
    let word = |at: usize| {
        bytes
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, |b: [u8; 4]| u32::from_le_bytes(b) as usize)
    };
    let count = word(0);
    let mut data = 4 + count * 8;
    let mut map = Vec::with_capacity(count);
    for i in 0..count {
        let (n, v) = (word(4 + i * 8), word(8 + i * 8));
        let name = bytes.get(data..data + n).unwrap_or_default();
        data += n + 1;
        let value = bytes.get(data..data + v).unwrap_or_default();
        data += v + 1;
        map.push((
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
    map
}

/// One host call: its status (or, for WASI, its errno).
fn call(caller: &mut Caller<'_, State>, name: &str, a: &[Val]) -> Result<i32, Error> {
    match name {
        "proxy_log" => {
            if i32_at(a, 0) >= 3 {
                let text = read_str(caller, u_at(a, 1), u_at(a, 2))?;
                if let Some(label) = text.strip_prefix("cp:") {
                    let fuel = caller.get_fuel().unwrap_or(0);
                    caller
                        .data_mut()
                        .checkpoints
                        .push((label.to_string(), fuel));
                } else {
                    caller.data_mut().warnings.push(text);
                }
            }
            Ok(OK)
        }
        "proxy_get_current_time_nanoseconds" => {
            let now = caller.data().now_ns;
            write(caller, u_at(a, 0), &now.to_le_bytes())?;
            Ok(OK)
        }
        "proxy_get_buffer_bytes" => {
            let bytes = match i32_at(a, 0) {
                PLUGIN_CONFIGURATION => caller.data().plugin_configuration.clone(),
                CALL_RESPONSE_BODY => caller.data().call_response.1.clone(),
                VM_CONFIGURATION => Vec::new(),
                _ => return Ok(NOT_FOUND),
            };
            let start = u_at(a, 1).min(bytes.len());
            let end = start.saturating_add(u_at(a, 2)).min(bytes.len());
            give(caller, &bytes[start..end], u_at(a, 3), u_at(a, 4))?;
            Ok(OK)
        }
        "proxy_get_header_map_pairs" => {
            let map = match i32_at(a, 0) {
                REQUEST_HEADERS => caller.data().request_headers.clone(),
                RESPONSE_HEADERS => caller.data().response_headers.clone(),
                CALL_RESPONSE_HEADERS => caller.data().call_response.0.clone(),
                _ => Vec::new(),
            };
            give(caller, &serialize_map(&map), u_at(a, 1), u_at(a, 2))?;
            Ok(OK)
        }
        "proxy_get_header_map_value" => {
            let key = read_str(caller, u_at(a, 1), u_at(a, 2))?;
            let state = caller.data();
            let map = match i32_at(a, 0) {
                REQUEST_HEADERS => &state.request_headers,
                RESPONSE_HEADERS => &state.response_headers,
                CALL_RESPONSE_HEADERS => &state.call_response.0,
                _ => return Ok(NOT_FOUND),
            };
            match map.iter().find(|(n, _)| *n == key).map(|(_, v)| v.clone()) {
                Some(v) => {
                    give(caller, v.as_bytes(), u_at(a, 3), u_at(a, 4))?;
                    Ok(OK)
                }
                None => Ok(NOT_FOUND),
            }
        }
        "proxy_add_header_map_value" | "proxy_replace_header_map_value" => {
            let key = read_str(caller, u_at(a, 1), u_at(a, 2))?;
            let value = read_str(caller, u_at(a, 3), u_at(a, 4))?;
            if i32_at(a, 0) == RESPONSE_HEADERS {
                caller.data_mut().response_headers.push((key, value));
            }
            Ok(OK)
        }
        // No property is set (the filter reads `node.id` at start-up).
        "proxy_get_property" => Ok(NOT_FOUND),
        "proxy_get_shared_data" => {
            let key = read_str(caller, u_at(a, 0), u_at(a, 1))?;
            match caller.data().shared.get(&key).cloned() {
                Some((value, cas)) => {
                    give(caller, &value, u_at(a, 2), u_at(a, 3))?;
                    write_u32(caller, u_at(a, 4), cas as usize)?;
                    Ok(OK)
                }
                None => Ok(NOT_FOUND),
            }
        }
        "proxy_set_shared_data" => {
            let key = read_str(caller, u_at(a, 0), u_at(a, 1))?;
            let value = read(caller, u_at(a, 2), u_at(a, 3))?;
            let cas = u32::from_ne_bytes(i32_at(a, 4).to_ne_bytes());
            let shared = &mut caller.data_mut().shared;
            let current = shared.get(&key).map_or(0, |(_, c)| *c);
            if cas != 0 && cas != current {
                return Ok(CAS_MISMATCH);
            }
            shared.insert(key, (value, current.wrapping_add(1).max(1)));
            Ok(OK)
        }
        "proxy_register_shared_queue" | "proxy_resolve_shared_queue" => {
            let (at, len, out) = if name == "proxy_register_shared_queue" {
                (0, 1, 2)
            } else {
                (2, 3, 4)
            };
            let queue = read_str(caller, u_at(a, at), u_at(a, len))?;
            let queues = &mut caller.data_mut().queues;
            let id = match queues.iter().position(|(n, _)| *n == queue) {
                Some(i) => i,
                None if name == "proxy_register_shared_queue" => {
                    queues.push((queue, VecDeque::new()));
                    queues.len() - 1
                }
                None => return Ok(NOT_FOUND),
            };
            write_u32(caller, u_at(a, out), id)?;
            Ok(OK)
        }
        "proxy_enqueue_shared_queue" => {
            let value = read(caller, u_at(a, 1), u_at(a, 2))?;
            let id = u_at(a, 0);
            let state = caller.data_mut();
            let Some((_, queue)) = state.queues.get_mut(id) else {
                return Ok(NOT_FOUND);
            };
            queue.push_back(value);
            state.woken.push(u32::try_from(id).unwrap_or(0));
            Ok(OK)
        }
        "proxy_dequeue_shared_queue" => {
            let id = u_at(a, 0);
            let Some((_, queue)) = caller.data_mut().queues.get_mut(id) else {
                return Ok(NOT_FOUND);
            };
            match queue.pop_front() {
                Some(v) => {
                    give(caller, &v, u_at(a, 1), u_at(a, 2))?;
                    Ok(OK)
                }
                None => Ok(EMPTY),
            }
        }
        "proxy_define_metric" => {
            let id = caller.data().metrics;
            caller.data_mut().metrics += 1;
            write_u32(caller, u_at(a, 3), id)?;
            Ok(OK)
        }
        "proxy_http_call" => {
            let headers = deserialize_map(&read(caller, u_at(a, 2), u_at(a, 3))?);
            let body = read(caller, u_at(a, 4), u_at(a, 5))?;
            let state = caller.data_mut();
            state.next_token = state.next_token.wrapping_add(1);
            let token = state.next_token;
            state.calls.push(Call {
                token,
                headers,
                body,
            });
            write_u32(caller, u_at(a, 9), token as usize)?;
            Ok(OK)
        }
        "proxy_send_local_response" => {
            caller.data_mut().local_reply = Some(i32_at(a, 0));
            Ok(OK)
        }
        // WASI: the environment (the deployment secret), entropy, stderr.
        "environ_sizes_get" => {
            let env = &caller.data().env;
            let count = env.len();
            let size: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
            write_u32(caller, u_at(a, 0), count)?;
            write_u32(caller, u_at(a, 1), size)?;
            Ok(0)
        }
        "environ_get" => {
            let env = caller.data().env.clone();
            let (mut ptrs, mut buf) = (u_at(a, 0), u_at(a, 1));
            for (k, v) in env {
                let entry = format!("{k}={v}\0");
                write_u32(caller, ptrs, buf)?;
                write(caller, buf, entry.as_bytes())?;
                ptrs += 4;
                buf += entry.len();
            }
            Ok(0)
        }
        "random_get" => {
            // Fixed bytes: the run is the same every time.
            let bytes: Vec<u8> = (0..u_at(a, 1))
                .map(|i| (i as u8).wrapping_mul(151))
                .collect();
            write(caller, u_at(a, 0), &bytes)?;
            Ok(0)
        }
        "fd_write" => {
            let (iovs, n) = (u_at(a, 1), u_at(a, 2));
            let mut total = 0;
            for i in 0..n {
                let iov = read(caller, iovs + i * 8, 8)?;
                let len = u32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]) as usize;
                total += len;
            }
            write_u32(caller, u_at(a, 3), total)?;
            Ok(0)
        }
        "proc_exit" => Err(Error::new("the module exited")),
        // Effective context, resuming a stream, timers, gRPC, foreign
        // functions: nothing the request path needs an answer from.
        _ => Ok(OK),
    }
}
