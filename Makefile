# RezusCloud build and test entry points. `make test` and `make demo` work on a
# fresh machine: they build what they need, including OpenTofu (cached outside
# the repository), the simulated provider and, for `make test` and
# `make demo CLOUD=openstack`, the OpenStack provider (built once from the Go
# module proxy into the same cache); the providers are installed into the
# filesystem mirror bin/providers. `make test` also builds the real
# Kubernetes control plane that the simulated cloud runs for a tenant
# (etcd, etcdutl, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl; scripts/kube.sh, once into the same cache), and a real
# S3-compatible server for the backup store's tests (versitygw;
# scripts/s3.sh, once into the same cache). Every go build says how many packages it
# compiles and how long it has left (scripts/gobuild.sh).

GO       ?= go
BIN      := bin
MIRROR   := $(BIN)/providers
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/rezuscloud/rezuscloud/internal/version.Version=$(VERSION)
FUZZTIME ?= 20s

# The tofu binary: found on PATH, in the cache, or built once (see scripts/tools.sh).
TOFU_BIN  = $(shell bash scripts/tools.sh | tail -n1)
# The Kubernetes control plane's binaries: built once (see scripts/kube.sh).
KUBE_BIN  = $(shell bash scripts/kube.sh | tail -n1)
# The S3-compatible server of the backup store's tests: built once (see scripts/s3.sh).
S3_BIN    = $(shell bash scripts/s3.sh | tail -n1)

export CGO_ENABLED ?= 0

# The demo's cloud: sim (the default), openstack or metal.
CLOUD    := sim

.PHONY: all tools kube s3 chromium build openstack-provider test lint vet bench fuzz demo clean

all: build

tools:
	@bash scripts/tools.sh >/dev/null

kube:
	@bash scripts/kube.sh >/dev/null

s3:
	@bash scripts/s3.sh >/dev/null

# Chromium for the dashboard's browser tests: Debian's package, installed
# when missing. When it cannot be installed the script says why (exit 3)
# and the browser tests skip with that reason.
chromium:
	@bash scripts/chromium.sh >/dev/null || [ $$? -eq 3 ]

# The server, the CLI and the simulated provider.
build:
	@mkdir -p $(BIN)
	@bash scripts/gobuild.sh "build: rezuscloud, rezusctl" -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/rezuscloud ./cmd/rezusctl
	@bash scripts/install-provider.sh $(MIRROR) >/dev/null

# The OpenStack provider, which only the tests and the OpenStack demo use.
openstack-provider:
	@bash scripts/openstack-provider.sh $(MIRROR) >/dev/null

# deploy/ is a module of its own (Helm's dependencies stay out of the
# server's): the tests of the image recipe, the chart and the systemd unit.
DEPLOY := cd deploy && GOWORK=off

vet:
	$(GO) vet ./...
	$(DEPLOY) $(GO) vet ./...

# The end-to-end package ./test starts first, beside the others
# (scripts/gotest.sh).
test: tools kube s3 chromium build openstack-provider vet
	TOFU=$(TOFU_BIN) REZUSCLOUD_KUBE_BIN=$(KUBE_BIN) REZUSCLOUD_S3_BIN=$(S3_BIN) REZUSCLOUD_PROVIDER_MIRROR=$(abspath $(MIRROR)) CGO_ENABLED=1 GO=$(GO) \
		bash scripts/gotest.sh -race -timeout 30m
	$(DEPLOY) $(GO) test -timeout 10m ./...

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck ./...; else echo "lint: staticcheck not installed; ran gofmt and go vet"; fi

bench: tools kube s3 build openstack-provider
	TOFU=$(TOFU_BIN) REZUSCLOUD_KUBE_BIN=$(KUBE_BIN) REZUSCLOUD_S3_BIN=$(S3_BIN) REZUSCLOUD_PROVIDER_MIRROR=$(abspath $(MIRROR)) \
		$(GO) test -run '^$$' -bench . -benchmem ./...

# Every fuzz target of the module (every func FuzzX), FUZZTIME each.
fuzz:
	@bash scripts/fuzz.sh $(FUZZTIME)

# The sim demo's tenants get a real Kubernetes API: it needs the control
# plane's binaries (make kube; built once, then cached).
demo: tools build $(if $(filter openstack,$(CLOUD)),openstack-provider) $(if $(filter sim,$(CLOUD)),kube)
	./$(BIN)/rezuscloud demo --cloud $(CLOUD) --tofu $(TOFU_BIN) $(if $(filter sim,$(CLOUD)),--sim-kube-bin $(KUBE_BIN))

clean:
	rm -rf $(BIN)
