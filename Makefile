# OPKE's front door. `make help` lists the targets.
GO       ?= go
# The Go release every target builds and tests with: go1.26.11 fixes the
# standard library's vulnerabilities govulncheck finds in go1.26.8 (net/http,
# html/template, crypto/x509; make vulncheck). The go command fetches it
# from the module proxy once (about 10 s), whatever Go the machine has.
export GOTOOLCHAIN := go1.26.11
# make vulncheck: the snapshot of golang.org/x/vulndb (the Go vulnerability
# database's reports) and the govulncheck it runs.
VULNDB      := v0.0.0-20261105234957-e22db6528018
GOVULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0
BIN      := bin/opke
FUZZTIME ?= 30s
# Minimizing each new input may take the whole FUZZTIME of a target with
# large inputs (a spec pair): bounded, as a CI run is.
FUZZMINIMIZE ?= 1s
# make fuzz runs on go1.27.3: Go 1.26's fuzzing coordinator may fail a target
# with a bare "context deadline exceeded" when -fuzztime ends while a worker
# is busy, no input at fault (golang/go#75804; CI failed on it in
# FuzzParsePush); go1.27's internal/fuzz takes its own deadline for the end
# it is. Fetched from the module proxy like the other (about 10 s), and its
# builds cost a cold machine about two minutes more.
FUZZTOOLCHAIN ?= go1.27.3
BENCH    ?= .
BENCHTIME ?= 1s
COUNT    ?= 5
# full: 20 kills of a create and of an upgrade, and the other scenarios
# 3-5 times (~15 minutes); short: CI's form (~4 minutes).
CHAOS    ?= full
# make world: all (every Kubernetes version of the test matrix) or e2e
# (what the real-host suites use).
WORLD    ?= all

.DEFAULT_GOAL := help
.PHONY: deps build test conformance realhosts e2e clean-hosts world run sim-cli lint fuzz bench microbench chaos verify vulncheck world-vulncheck k8s-conformance help

## deps: install, as root, the Debian packages the tests need (.ci/packages, the list .ci/run installs)
deps:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$(sed 's/#.*//' .ci/packages)

## build: build the opke binary into bin/opke
build:
	@echo "Building $(BIN) (the first build fetches and compiles the dependencies and may take a few minutes; later ones take seconds)."
	$(GO) build -o $(BIN) ./cmd/opke

## test: run every test with the race detector, in random order
test:
	$(GO) test -race -shuffle=on -timeout 15m ./...

## vulncheck: govulncheck on every package against the Go vulnerability database built from a golang.org/x/vulndb snapshot (VULNDB) the module proxy serves (vuln.go.dev is not reachable here), kept under OPKE_CACHE
vulncheck:
	@dir=$$($(GO) mod download -json golang.org/x/vulndb@$(VULNDB) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	  test -n "$$dir" || { echo "vulncheck: golang.org/x/vulndb@$(VULNDB) could not be downloaded" >&2; exit 1; }; \
	  db=$${OPKE_CACHE:-$$HOME/.cache/opke}/vulndb-$(VULNDB); \
	  $(GO) run ./internal/vulndb -osv "$$dir/data/osv" -version $(VULNDB) -out "$$db" && \
	  $(GO) run $(GOVULNCHECK) -db "file://$$db" ./...

## world-vulncheck: the Go advisories each binary of the e2e world calls (built first if missing), its own code's apart from its dependencies'
world-vulncheck:
	@dir=$$($(GO) mod download -json golang.org/x/vulndb@$(VULNDB) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	  test -n "$$dir" || { echo "world-vulncheck: golang.org/x/vulndb@$(VULNDB) could not be downloaded" >&2; exit 1; }; \
	  cache=$${OPKE_CACHE:-$$HOME/.cache/opke}; db=$$cache/vulndb-$(VULNDB); \
	  $(GO) run ./internal/vulndb -osv "$$dir/data/osv" -version $(VULNDB) -out "$$db" && \
	  GOBIN=$$cache/bin $(GO) install $(GOVULNCHECK) && \
	  $(GO) run ./cmd/opke-world vulncheck --set e2e --govulncheck $$cache/bin/govulncheck --db "file://$$db"

## conformance: a real OpenStack (Zed, Debian's packages) on 127.0.0.1, the contract tests against it, then down (test/openstack)
conformance:
	bash test/openstack/conformance.sh

# The end-to-end tests that run on real machines too (OPKE_TEST_HOSTS=real),
# and those that run only there (build tag realhosts).
REALHOST_E2E = TestResyncReadsTheHosts|TestControllerFromTheMirror

## realhosts: real machines (runc, systemd, OpenSSH, Debian's Ignition; root): the world's e2e set and the host image built or taken from their caches (OPKE_CACHE), then the real-host tests (build tag realhosts): the machines and fabric, the simulator with --hosts real driven by the upstream ssh, sftp and nc, a controller from the registry mirror, and the README's first session run as written (make run's in-process hosts, make world's kubectl)
realhosts:
	$(GO) run ./cmd/opke-world build --set e2e
	$(GO) test -race -tags realhosts -count=1 ./world/... ./cmd/opke-world/
	$(GO) test -race -tags realhosts -count=1 -timeout 20m -run '.' ./cloudsim/machine/...
	$(GO) test -race -tags realhosts -count=1 -timeout 20m -run 'RealHosts|README' ./cloudsim/ ./cmd/opke/
	OPKE_TEST_HOSTS=real $(GO) test -race -tags realhosts -count=1 -timeout 30m -run '$(REALHOST_E2E)' ./reconciler/

# The real clusters: OPKE's apply on real machines, then what Kubernetes
# itself says of the cluster.
E2E = TestClusterComesUp|TestControlPlaneOfThree|TestClusterFromGit

## e2e: real clusters on real machines (root), every image from the simulator's registry mirror (make world's e2e set, built or cached): a controller and a worker with the cloud controller manager come up Ready with kube-proxy, flannel, kube-router and CoreDNS; pod DNS and networking; a NetworkPolicy enforced (kube-router), then networkPolicy: none pruning its objects; a LoadBalancer Service through Octavia; scale out and in with real drains; a worker whose kubelet stopped remediated; patch and minor upgrades; deletion, a bound claim's Cinder volume with it; then three controllers through a minor upgrade with etcd's quorum kept, a lost one replaced, 3 -> 5 -> 3, one in ERROR kept while its etcd answers, one powered off remediated, controllers.flavor rolled one member at a time; then a cluster driven only by git commits to the opke binary serving a fleet (controllers 1 -> 3, the CAs rotated in three commits with every pod up after each and the kubeconfig from before refused at the end, 3 -> 1), kubectl and the daemon's API (OPKE_E2E_WAIT bounds each wait for a cluster to come up, 10m); about 55 minutes on 2 cores, so CI runs TestClusterComesUp alone (.ci/run says why)
e2e:
	$(GO) run ./cmd/opke-world build --set e2e
	OPKE_TEST_HOSTS=real $(GO) test -race -tags realhosts -count=1 -timeout 75m -run '$(E2E)' -v ./reconciler/

## k8s-conformance: upstream's conformance suite on a cluster OPKE makes on real machines (root): one controller, two workers on the world's first version; upstream's conformance image (e2e.test, ginkgo, go-runner; make world's conformance set) run in the cluster as its conformance-e2e.yaml runs it; FOCUS, SKIP and PARALLEL as E2E_FOCUS, E2E_SKIP and E2E_PARALLEL (default: every [Conformance] spec, the parallel ones in parallel, then the [Serial] ones alone), GINKGO_ARGS as E2E_EXTRA_GINKGO_ARGS of the parallel run (default --procs=4), its JUnit reports and logs in CONFORMANCE_OUT/<phase>
FOCUS ?= \[Conformance\]
SKIP ?=
PARALLEL ?= true
GINKGO_ARGS ?= --procs=4
CONFORMANCE_OUT ?= $(CURDIR)/.opke/conformance
k8s-conformance:
	$(GO) run ./cmd/opke-world build --set conformance
	OPKE_TEST_HOSTS=real OPKE_CONFORMANCE_FOCUS='$(FOCUS)' OPKE_CONFORMANCE_SKIP='$(SKIP)' OPKE_CONFORMANCE_PARALLEL='$(PARALLEL)' OPKE_CONFORMANCE_GINKGO_ARGS='$(GINKGO_ARGS)' OPKE_CONFORMANCE_OUT='$(CONFORMANCE_OUT)' \
	  $(GO) test -tags realhosts -count=1 -timeout 4h -run 'TestK8sConformance' -v ./reconciler/

## clean-hosts: remove what killed real-host runs left: their machines (with their folders and disks), mounts and network namespaces (opke sim --clean-hosts; root; no real-host simulator may be running)
clean-hosts: build
	./$(BIN) sim --clean-hosts
	@# The folders of Go tests killed with their machines (a machine not yet
	@# started there is not runc's to list): each holds a simulator's hosts.
	@for d in $${TMPDIR:-/tmp}/Test*; do \
	  if [ -d "$$d" ] && find "$$d" -maxdepth 3 -type d -name hosts -print -quit | grep -q .; then echo "rm -rf $$d"; rm -rf "$$d"; fi; \
	done

## world: the test world's Kubernetes built from upstream source through the Go module proxy (components, etcd, pause, containerd, runc, the registry) with their images, cached by version outside the repository (OPKE_CACHE); WORLD=all|e2e|peer
world:
	$(GO) run ./cmd/opke-world build --set $(WORLD)

## run: the daemon on the embedded default: embedded etcd, the simulator, a fleet repo seeded from clusters/
run: build
	./$(BIN) validate .
	./$(BIN) serve --data-dir .opke --sim 127.0.0.1:5050 --repo .opke/fleet --seed . --listen 127.0.0.1:8080 --resync-interval 2m

## sim-cli: drive the simulator with the real openstack CLI (python3-openstackclient)
sim-cli:
	CI=$${CI:-local} $(GO) test -count=1 -run '^TestOpenStackCLI$$' -v ./cloudsim

## lint: gofmt, go vet and staticcheck (pinned in go.mod's tool directive), the chaos and real-host suites' files (build tags chaos, realhosts) included
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet -tags chaos,realhosts ./...
	$(GO) tool staticcheck -tags chaos,realhosts ./...

## fuzz: run every fuzz target for FUZZTIME each (default 30s; minimizing FUZZMINIMIZE, 1s), on FUZZTOOLCHAIN (go1.27.3)
fuzz: export GOTOOLCHAIN := $(FUZZTOOLCHAIN)
fuzz:
	@$(GO) version
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$target"; \
	    $(GO) test -run='^$$' -fuzz="^$$target$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINIMIZE) $$pkg; \
	  done; \
	done

## bench: the fleet-scale report: each benchmark COUNT times (5), one table of medians and spreads, OpenTofu's plan beside OPKE's, bench.json (BENCH=regexp; OPKE_BENCH_SIZES=1,100,1000; OPKE_PEER_SIZES=1,10,30,100; the shared fleet once, OPKE_SHARD_CLUSTERS=10000 across OPKE_SHARD_DAEMONS=4, into bench-shard.json)
bench:
	$(GO) run ./cmd/opke-world build --set peer
	$(GO) run ./bench/report -count $(COUNT) -bench '$(BENCH)' -skip 'CommitToStatusPoll|ShardedFleet' -json bench.json
	$(GO) run ./bench/report -count 1 -bench 'CommitToStatusPoll' -pkgs ./bench -json bench-poll.json
	$(GO) run ./bench/report -count 1 -bench 'ShardedFleet' -pkgs ./bench -json bench-shard.json

## chaos: real processes killed, stopped, paused and cut off mid-apply; one table (scenario, runs, converged, duplicates, orphans, lost records), chaos.json (CHAOS=short: CI's form)
chaos:
	OPKE_CHAOS=$(CHAOS) OPKE_CHAOS_JSON=$(if $(filter full,$(CHAOS)),$(CURDIR)/chaos.json) \
	  $(GO) test -C chaos -tags chaos -count=1 -timeout 40m -parallel 3

## microbench: every package's Go benchmarks (BENCH=regexp, BENCHTIME=1s), as go test prints them
microbench:
	$(GO) test -run='^$$' -bench='$(BENCH)' -benchtime=$(BENCHTIME) -benchmem ./...

## verify: regenerate, tidy and format, then fail if that changed the tree
verify:
	$(GO) generate ./...
	$(GO) mod tidy
	gofmt -w $$(git ls-files '*.go')
	@git diff --exit-code || { echo "verify: the tree changed; commit the result"; exit 1; }
	@test -z "$$(git status --porcelain)" || { git status --porcelain; echo "verify: untracked files"; exit 1; }

## help: list the targets
help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed 's/^## //' | awk -F': ' '{printf "  %-12s %s\n", $$1, $$2}'
