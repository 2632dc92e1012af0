# Deployment checks, included by the root Makefile (`-include deploy/check.mk`);
# `make test` runs `deploy-check`. Every name here starts with deploy-/DEPLOY_
# (or is images, wasm-oci or agent-oci), so nothing clashes with the root Makefile. Run from the
# repository root. See deploy/README.md.

DEPLOY_VENV        ?= .venv-deploy
DEPLOY_PY          := $(DEPLOY_VENV)/bin/python
DEPLOY_OUT         ?= target/deploy
DEPLOY_OVERLAYS    := deploy/overlays/istio deploy/overlays/envoy
DEPLOY_AGENT_BIN   ?= target/release/meshlimit-agent
DEPLOY_CLI_BIN     ?= target/release/meshlimit
DEPLOY_FILTER_WASM ?= target/wasm32-wasip1/release/meshlimit_filter.wasm
DEPLOY_ENVOY       ?= $(or $(ENVOY),.venv/bin/envoy)
DEPLOY_OCI_DIR     ?= target/oci/meshlimit-filter
DEPLOY_AGENT_OCI   ?= target/oci/meshlimit-agent
# The agent image's binary: static (musl), so the image needs no base at all.
DEPLOY_MUSL        := x86_64-unknown-linux-musl
DEPLOY_AGENT_MUSL  ?= target/$(DEPLOY_MUSL)/release/meshlimit-agent
DEPLOY_AGENT_PINS  := deploy/overlays/istio/kustomization.yaml deploy/overlays/envoy/kustomization.yaml
DEPLOY_FILTER_PINS := deploy/istio/wasmplugin.yaml deploy/istio/examples/one-workload.yaml
# Envoy bootstraps outside the overlays held to the shipped fleet's rules (every
# HCM that runs the filter: use_remote_address, path normalisation, headers with
# underscores rejected; the filter never FAIL_OPEN, MESHLIMIT_SECRET from the
# host): the repository's own and the tests' Istio-shaped ones.
DEPLOY_BOOTSTRAPS  ?= deploy/envoy/envoy.yaml envoy.yaml tests/envoy/istio-sidecar.yaml tests/envoy/istio-gateway.yaml tests/envoy/jwt.yaml

# The checks leave no __pycache__ in deploy/tools.
deploy-% images wasm-oci agent-oci: export PYTHONDONTWRITEBYTECODE = 1

# The rules file's JSON Schema (generated from the agent's types; a core test
# keeps the committed file equal to them) and what it must accept and refuse:
# the bad fixtures whose mistake a schema can express (not duplicates, plan
# names, refill times, cost against burst, period ranges: check-rules' own).
# The tests' rules fixtures (tests/fixtures/rules/*.yaml) are all valid; the
# deliberately invalid ones are under tests/fixtures/rules/invalid/.
DEPLOY_SCHEMA      ?= docs/rules.schema.json
DEPLOY_SCHEMA_GOOD ?= deploy/rules.yaml deploy/base/rules.yaml $(wildcard core/tests/fixtures/good*.yaml core/tests/fixtures/good*.json) \
                      $(wildcard tests/fixtures/rules/*.yaml)
DEPLOY_SCHEMA_BAD  ?= $(addprefix core/tests/fixtures/bad-,unknown-field.yaml period.yaml name.yaml key.yaml \
                        no-limit.yaml zero.yaml mode.yaml header-match.yaml no-rules.yaml version.yaml \
                        burst-range.yaml top-level.yaml nine.yaml algorithm.yaml)

.PHONY: deploy-check deploy-tools deploy-selftest deploy-manifests deploy-alerts \
        deploy-rules deploy-rollout deploy-envoy-config deploy-oci deploy-metrics \
        deploy-schema images wasm-oci agent-oci

deploy-check: deploy-selftest deploy-manifests deploy-alerts deploy-rules \
              deploy-rollout deploy-envoy-config deploy-oci deploy-metrics deploy-schema
	@echo "deploy-check: passed"

# Tools: a pinned venv (a second run installs nothing), promtool from Debian's
# prometheus package only when missing, and kubectl's built-in kustomize.
deploy-tools: $(DEPLOY_VENV)/.installed
	@command -v promtool >/dev/null 2>&1 || { \
	  echo "deploy-tools: installing promtool (Debian package prometheus)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@command -v kubectl >/dev/null 2>&1 || { \
	  echo "deploy-tools: kubectl (with its built-in kustomize) is needed to render deploy/overlays"; exit 1; }
	@echo "deploy-tools: $$(kubectl version --client 2>/dev/null | grep -i kustomize);" \
	  "$$(promtool --version 2>&1 | head -1);" \
	  "kubernetes-validate $$($(DEPLOY_PY) -m kubernetes_validate --version 2>&1)"

$(DEPLOY_VENV)/.installed: deploy/tools/requirements.txt
	python3 -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/pip install --quiet --disable-pip-version-check -r deploy/tools/requirements.txt
	touch $@

# The checks' own tests: each check fails on the breakage it exists for.
deploy-selftest: deploy-tools
	$(DEPLOY_PY) -m unittest discover -s deploy/tools -p 'test_*.py'

# Render every overlay; validate standard kinds (kubernetes-validate, strict)
# and the CRDs (deploy/schemas); lint meshlimit's own invariants, the trust
# boundary included (secret, NetworkPolicy, hardened HCMs, no FAIL_OPEN), and
# hold every DEPLOY_BOOTSTRAPS file to the same HCM and filter rules.
deploy-manifests: deploy-tools
	$(DEPLOY_PY) deploy/tools/manifests.py --out $(DEPLOY_OUT) $(DEPLOY_OVERLAYS) \
	  $(addprefix --bootstrap ,$(DEPLOY_BOOTSTRAPS))

# The rendered PrometheusRule's rules: promtool check, then its unit tests; the
# dashboard's queries, parsed by promtool as recording rules.
# Every alert has a runbook_url naming a file in docs/runbooks/ and promtool
# cases where it fires and where it stays silent.
deploy-alerts: deploy-manifests
	cp deploy/monitoring/tests.yaml $(DEPLOY_OUT)/tests.yaml
	cd $(DEPLOY_OUT) && promtool check rules alerts.rules.yaml dashboard-queries.rules.yaml \
	  && promtool test rules tests.yaml
	$(DEPLOY_PY) deploy/tools/alerts_check.py --rules $(DEPLOY_OUT)/alerts.rules.yaml \
	  --tests deploy/monitoring/tests.yaml --runbooks docs/runbooks

# Every example and good fixture (and the rules examples of the README and
# the book's guide) validates
# against the published schema; the expressible bad fixtures do not.
deploy-schema: deploy-manifests
	$(DEPLOY_PY) deploy/tools/schema_check.py --schema $(DEPLOY_SCHEMA) \
	  --good $(DEPLOY_SCHEMA_GOOD) $(DEPLOY_OUT)/configmap-rules-istio.yaml $(DEPLOY_OUT)/configmap-rules-envoy.yaml \
	  --bad $(DEPLOY_SCHEMA_BAD) --docs README.md $(wildcard docs/guide/*.md)

# The rules each overlay's ConfigMap ships pass the agent's own validation
# (`meshlimit check-rules`, built on the agent's loader) for the place they are
# deployed: the Istio overlay's on sidecars, the plain-Envoy overlay's (the
# base's, deploy/rules.yaml) on gateways. A broken copy fails (so a passing
# check-rules means something), and the gateway rules fail as sidecar rules
# (their per-IP rules would put every outside client in one bucket there).
deploy-rules: deploy-manifests
	@if [ ! -x $(DEPLOY_CLI_BIN) ]; then \
	  echo "SKIP deploy-rules: $(DEPLOY_CLI_BIN) not built (make test builds it first)"; \
	else \
	  set -e; \
	  $(DEPLOY_CLI_BIN) check-rules --profile gateway deploy/rules.yaml; \
	  $(DEPLOY_CLI_BIN) check-rules --profile gateway $(DEPLOY_OUT)/configmap-rules-envoy.yaml; \
	  $(DEPLOY_CLI_BIN) check-rules --profile sidecar $(DEPLOY_OUT)/configmap-rules-istio.yaml; \
	  sed '0,/^    limit:/s//    limt:/' deploy/rules.yaml > $(DEPLOY_OUT)/broken-rules.yaml; \
	  if $(DEPLOY_CLI_BIN) check-rules $(DEPLOY_OUT)/broken-rules.yaml 2>/dev/null; then \
	    echo "FAIL deploy-rules: check-rules accepted a rules file with an unknown field"; exit 1; fi; \
	  if $(DEPLOY_CLI_BIN) check-rules --profile sidecar deploy/rules.yaml 2>/dev/null; then \
	    echo "FAIL deploy-rules: check-rules --profile sidecar accepted rules keyed on client_ip"; exit 1; fi; \
	  echo "ok   each overlay's rules pass check-rules for where they run; a broken copy and gateway rules at a sidecar fail it"; \
	fi

# A rules change delivered the way the kubelet updates a ConfigMap volume (an
# atomic ..data symlink swap) is applied by a running agent; a broken one is
# refused and the last good rules stay.
deploy-rollout: deploy-tools
	@if [ ! -x $(DEPLOY_AGENT_BIN) ]; then \
	  echo "SKIP deploy-rollout: $(DEPLOY_AGENT_BIN) not built (make test builds it first)"; \
	else \
	  $(DEPLOY_PY) deploy/tools/rollout_check.py --agent $(DEPLOY_AGENT_BIN) --rules deploy/rules.yaml; \
	fi

# A real Envoy with the real filter loads the plain-Envoy fleet's bootstrap, and
# the WasmPlugin's pluginConfig as Istio would pass it (the filter refuses
# unknown or malformed settings when it is configured).
deploy-envoy-config: deploy-manifests
	@if [ ! -x $(DEPLOY_ENVOY) ] || [ ! -f $(DEPLOY_FILTER_WASM) ]; then \
	  echo "SKIP deploy-envoy-config: needs $(DEPLOY_ENVOY) and $(DEPLOY_FILTER_WASM)"; \
	else \
	  set -e; \
	  for f in envoy-fleet envoy-wasmplugin; do \
	    sed 's#/etc/meshlimit/meshlimit_filter.wasm#$(abspath $(DEPLOY_FILTER_WASM))#' \
	      $(DEPLOY_OUT)/$$f.yaml > $(DEPLOY_OUT)/$$f.local.yaml; \
	    $(DEPLOY_ENVOY) --mode validate -c $(DEPLOY_OUT)/$$f.local.yaml --log-level error >/dev/null \
	      || { echo "FAIL deploy-envoy-config: $$f.yaml does not load in Envoy with the filter"; \
	           $(DEPLOY_ENVOY) --mode validate -c $(DEPLOY_OUT)/$$f.local.yaml --log-level warn 2>&1 | tail -5; exit 1; }; \
	  done; \
	  for f in tests/envoy/istio-sidecar.yaml tests/envoy/istio-gateway.yaml tests/envoy/jwt.yaml; do \
	    sed 's#target/wasm32-wasip1/release/meshlimit_filter.wasm#$(abspath $(DEPLOY_FILTER_WASM))#' \
	      $$f > $(DEPLOY_OUT)/$$(basename $$f .yaml).local.yaml; \
	    $(DEPLOY_ENVOY) --mode validate -c $(DEPLOY_OUT)/$$(basename $$f .yaml).local.yaml --log-level error >/dev/null \
	      || { echo "FAIL deploy-envoy-config: $$f does not load in Envoy with the filter"; exit 1; }; \
	  done; \
	  echo "ok   Envoy with the filter loads deploy/envoy/envoy.yaml, the WasmPlugin's pluginConfig, tests/envoy/istio-*.yaml and tests/envoy/jwt.yaml"; \
	fi

# The images' layouts: index -> manifest -> config and layer digests and sizes
# match the blobs, the layer holds the file, packing is deterministic, and the
# manifests pin what was built. The filter: the module `make build` built (a
# placeholder module when none is); a pin of another module is a note, since
# `make wasm-oci` is what updates it. The agent: the image `make agent-oci`
# built, when there is one, must be the one the DaemonSet pins (fail).
deploy-oci: deploy-tools
	@mkdir -p $(DEPLOY_OUT)
	@if [ -f $(DEPLOY_FILTER_WASM) ]; then \
	  set -e; \
	  $(DEPLOY_PY) deploy/tools/oci.py pack filter $(DEPLOY_FILTER_WASM) $(DEPLOY_OCI_DIR); \
	  $(DEPLOY_PY) deploy/tools/oci.py verify $(DEPLOY_OCI_DIR) --file $(DEPLOY_FILTER_WASM); \
	  $(DEPLOY_PY) deploy/tools/oci.py pack filter $(DEPLOY_FILTER_WASM) $(DEPLOY_OUT)/oci-again >/dev/null; \
	  cmp -s $(DEPLOY_OCI_DIR)/index.json $(DEPLOY_OUT)/oci-again/index.json \
	    || { echo "FAIL deploy-oci: packing the same module twice gave two digests"; exit 1; }; \
	  built=$$($(DEPLOY_PY) deploy/tools/oci.py verify $(DEPLOY_OCI_DIR) | sed -n 's/.*manifest sha256://p'); \
	  if grep -q "^  sha256: $$built$$" deploy/istio/wasmplugin.yaml; then \
	    echo "ok   deploy/istio/wasmplugin.yaml pins the module built here ($$built)"; \
	  else \
	    echo "note deploy/istio/wasmplugin.yaml pins another module than the one built here ($$built): run make wasm-oci before pushing a new module"; \
	  fi; \
	else \
	  set -e; \
	  echo "     $(DEPLOY_FILTER_WASM) not built: checking the packer on a placeholder module"; \
	  printf '\000asm\001\000\000\000' > $(DEPLOY_OUT)/placeholder.wasm; \
	  $(DEPLOY_PY) deploy/tools/oci.py pack filter $(DEPLOY_OUT)/placeholder.wasm $(DEPLOY_OUT)/oci-placeholder; \
	  $(DEPLOY_PY) deploy/tools/oci.py verify $(DEPLOY_OUT)/oci-placeholder --file $(DEPLOY_OUT)/placeholder.wasm; \
	fi
	@set -e; for k in $(DEPLOY_AGENT_PINS); do \
	  pinned=$$($(DEPLOY_PY) deploy/tools/oci.py pinned $$k | sed -n 's/^agent sha256://p'); \
	  if [ -f $(DEPLOY_AGENT_OCI)/index.json ]; then \
	    built=$$($(DEPLOY_PY) deploy/tools/oci.py verify $(DEPLOY_AGENT_OCI) --file $(DEPLOY_AGENT_MUSL) | sed -n 's/.*manifest sha256://p'); \
	    [ "$$built" = "$$pinned" ] || { echo "FAIL deploy-oci: $$k pins agent image $$pinned, $(DEPLOY_AGENT_OCI) is $$built: run make agent-oci"; exit 1; }; \
	    echo "ok   $$k pins the agent image built here ($$built)"; \
	  else \
	    echo "     $(DEPLOY_AGENT_OCI) not built (make images): $$k pins agent image $$pinned"; \
	  fi; \
	done

# Every meshlimit_* name the dashboard and the alerts query is exported by a
# real agent (driven through a real Envoy with the filter, when both are built).
deploy-metrics: deploy-manifests
	@if [ ! -x $(DEPLOY_AGENT_BIN) ]; then \
	  echo "SKIP deploy-metrics: $(DEPLOY_AGENT_BIN) not built (make test builds it first)"; \
	else \
	  $(DEPLOY_PY) deploy/tools/metrics_check.py --dashboard $(DEPLOY_OUT)/dashboard.json \
	    --alerts $(DEPLOY_OUT)/alerts.rules.yaml --agent $(DEPLOY_AGENT_BIN) --rules deploy/rules.yaml \
	    --envoy $(DEPLOY_ENVOY) --wasm $(DEPLOY_FILTER_WASM); \
	fi

# The two images, built offline and pinned by digest in the manifests: commit
# the manifests with the images you push (docs/operations/deploying.md, "Build and push the images").
images: wasm-oci agent-oci

# Build the filter, package it for Istio's WasmPlugin (oci://), and pin the
# manifest digest as the `sha256` of deploy/istio/wasmplugin.yaml (and of the
# one-workload example).
wasm-oci:
	cargo build --release --target wasm32-wasip1 --manifest-path filter/Cargo.toml
	python3 deploy/tools/oci.py pack filter $(DEPLOY_FILTER_WASM) $(DEPLOY_OCI_DIR)
	python3 deploy/tools/oci.py verify $(DEPLOY_OCI_DIR) --file $(DEPLOY_FILTER_WASM)
	python3 deploy/tools/oci.py pin $(DEPLOY_OCI_DIR) $(DEPLOY_FILTER_PINS)

# Build the agent as a static musl binary (the musl target and musl-gcc, for
# ring's C, installed when missing), package it on an empty base, and pin the
# manifest digest in the DaemonSet's image. Paths are remapped so the binary,
# and so the digest, does not depend on where the repository or cargo lives.
agent-oci:
	@rustup target list --installed | grep -qx '$(DEPLOY_MUSL)' || { \
	  echo "agent-oci: rustup target add $(DEPLOY_MUSL)"; rustup target add $(DEPLOY_MUSL); }
	@command -v musl-gcc >/dev/null 2>&1 || { \
	  echo "agent-oci: installing musl-gcc (Debian package musl-tools)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends musl-tools >/dev/null; }
	CC_x86_64_unknown_linux_musl=musl-gcc \
	  RUSTFLAGS="--remap-path-prefix=$(CURDIR)=/meshlimit --remap-path-prefix=$${CARGO_HOME:-$$HOME/.cargo}=/cargo" \
	  cargo build --release --locked --target $(DEPLOY_MUSL) -p meshlimit-agent
	python3 deploy/tools/oci.py pack agent $(DEPLOY_AGENT_MUSL) $(DEPLOY_AGENT_OCI)
	python3 deploy/tools/oci.py verify $(DEPLOY_AGENT_OCI) --file $(DEPLOY_AGENT_MUSL)
	python3 deploy/tools/oci.py pin $(DEPLOY_AGENT_OCI) $(DEPLOY_AGENT_PINS)
