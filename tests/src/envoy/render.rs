//! `envoy.yaml` rewritten for one test Envoy: its ports, its access log, and the
//! wasm filter's plugin configuration and module (or no filter at all).

use serde_json::{Map, Value as Json};

use super::{EnvoyConfig, EnvoyPorts};

/// A YAML document read into values: `envoy.yaml` is read and written through
/// JSON's value tree (YAML holds JSON; Envoy reads the keys in any order).
type Yaml = Json;
type Mapping = Map<String, Json>;

/// The ports `envoy.yaml` uses, which the harness replaces.
const LISTENER_PORT: u64 = 10_000;
const BACKEND_PORT: u64 = 10_001;
const ADMIN_PORT: u64 = 9_901;
const AGENT_PORT: u64 = 8_081;
const WASM_FILTER: &str = "envoy.filters.http.wasm";
const ROOT_ID: &str = "meshlimit";
const FILE_ACCESS_LOG: &str =
    "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog";

/// `envoy.yaml`'s text with its four ports replaced by `ports`, the plugin
/// configuration and module path set from `config` (or the wasm filter removed).
/// Errors if the file no longer has the shape this relies on.
pub fn render_envoy_config(
    base_yaml: &str,
    ports: &EnvoyPorts,
    config: &EnvoyConfig,
) -> Result<String, String> {
    let mut doc: Yaml = serde_saphyr::from_str(base_yaml).map_err(|e| e.to_string())?;
    let mut rewrite = Rewrite {
        ports,
        config,
        ports_seen: [false; 4],
        plugins_seen: 0,
        filters_removed: 0,
        replay_logs_added: 0,
    };
    rewrite.visit(&mut doc)?;
    if config.replay_log_headers.is_some() && rewrite.replay_logs_added != 1 {
        return Err(format!(
            "expected one `access_log` list to add the replay log to, found {}",
            rewrite.replay_logs_added
        ));
    }
    let names = ["10000", "10001", "9901", "8081"];
    for (seen, name) in rewrite.ports_seen.iter().zip(names) {
        if !seen {
            return Err(format!("no `port_value: {name}` to replace"));
        }
    }
    let wasm_found = rewrite.plugins_seen + rewrite.filters_removed;
    if wasm_found != 1 {
        return Err(format!(
            "expected one {WASM_FILTER} filter with root_id {ROOT_ID}, found {wasm_found}"
        ));
    }
    serde_saphyr::to_string(&doc).map_err(|e| e.to_string())
}

struct Rewrite<'a> {
    ports: &'a EnvoyPorts,
    config: &'a EnvoyConfig,
    ports_seen: [bool; 4],
    plugins_seen: usize,
    filters_removed: usize,
    replay_logs_added: usize,
}

impl Rewrite<'_> {
    fn visit(&mut self, node: &mut Yaml) -> Result<(), String> {
        match node {
            Yaml::Array(items) => {
                if !self.config.filter {
                    let before = items.len();
                    items.retain(|item| {
                        item.get("name").and_then(Yaml::as_str) != Some(WASM_FILTER)
                    });
                    self.filters_removed += before - items.len();
                }
                items.iter_mut().try_for_each(|item| self.visit(item))
            }
            Yaml::Object(map) => {
                self.port(map);
                self.access_log(map);
                if map.get("root_id").and_then(Yaml::as_str) == Some(ROOT_ID) {
                    self.plugin(map)?;
                }
                map.iter_mut()
                    .try_for_each(|(_, value)| self.visit(value))?;
                // After the visit, so that its path is not rewritten.
                self.replay_log(map);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn port(&mut self, map: &mut Mapping) {
        let Some(port) = map.get_mut("port_value") else {
            return;
        };
        let table = [
            (LISTENER_PORT, self.ports.listener),
            (BACKEND_PORT, self.ports.backend),
            (ADMIN_PORT, self.ports.admin),
            (AGENT_PORT, self.ports.agent),
        ];
        let Some(index) = table
            .iter()
            .position(|(from, _)| port.as_u64() == Some(*from))
        else {
            return;
        };
        *port = Yaml::from(table[index].1);
        self.ports_seen[index] = true;
    }

    /// A file access log writes where the config says, if it says.
    fn access_log(&mut self, map: &mut Mapping) {
        if map.get("@type").and_then(Yaml::as_str) != Some(FILE_ACCESS_LOG) {
            return;
        }
        if let (Some(path), Some(to)) = (map.get_mut("path"), &self.config.access_log) {
            *path = Yaml::from(to.to_string_lossy().into_owned());
        }
    }

    /// The replay log beside the connection manager's own access log: the
    /// `json_format` of docs/guide/replay.md, a field per
    /// header asked for.
    fn replay_log(&mut self, map: &mut Mapping) {
        let (Some(headers), Some(path)) = (
            &self.config.replay_log_headers,
            &self.config.replay_log_path,
        ) else {
            return;
        };
        let Some(Yaml::Array(logs)) = map.get_mut("access_log") else {
            return;
        };
        let mut format = serde_json::json!({
            "start_time": "%START_TIME%",
            "method": "%REQ(:METHOD)%",
            "path": "%REQ(:PATH)%",
            "client_ip": "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%",
            "route": "%ROUTE_NAME%",
            "host": "%REQ(:AUTHORITY)%",
        });
        for header in headers {
            format[header.as_str()] = Json::from(format!("%REQ({})%", header.to_uppercase()));
        }
        logs.push(serde_json::json!({
            "name": "envoy.access_loggers.file",
            "typed_config": {
                "@type": FILE_ACCESS_LOG,
                "path": path.to_string_lossy(),
                "log_format": { "json_format": format },
            },
        }));
        self.replay_logs_added += 1;
    }

    /// The wasm PluginConfig: its configuration string and module path.
    fn plugin(&mut self, plugin: &mut Mapping) -> Result<(), String> {
        self.plugins_seen += 1;
        let value = plugin
            .get_mut("configuration")
            .and_then(|c| c.get_mut("value"))
            .ok_or("the wasm plugin has no configuration.value")?;
        let configuration = match &self.config.plugin_raw {
            Some(raw) => raw.clone(),
            None => {
                let text = value
                    .as_str()
                    .ok_or("configuration.value is not a string")?;
                let mut json: Map<String, Json> = serde_json::from_str(text)
                    .map_err(|e| format!("plugin configuration is not a JSON object: {e}"))?;
                let authority = format!("127.0.0.1:{}", self.ports.agent);
                json.insert("agent_authority".into(), Json::from(authority));
                json.extend(self.config.plugin.clone());
                Json::Object(json).to_string()
            }
        };
        *value = Yaml::from(configuration);
        let filename = plugin
            .get_mut("vm_config")
            .and_then(|v| v.get_mut("code"))
            .and_then(|c| c.get_mut("local"))
            .and_then(|l| l.get_mut("filename"))
            .ok_or("the wasm plugin has no vm_config.code.local.filename")?;
        *filename = Yaml::from(self.config.wasm_path().to_string_lossy().into_owned());
        Ok(())
    }
}
