# bulkrun — build, deploy onto the local emulator, demo and tests.
#
#   make demo   start the emulator, build, deploy the CDK stack, run a real batch
#   make test   lint (golangci-lint, template linters), unit tests, then the integration suite on the emulator
#               (the web console in headless Chromium among it; make console-test: that alone),
#               the Python client's tests (make python-test), then the short soak (make soak-short; the emulator behind the fault proxy)
#   make bench  cost per 10^6 items, metered on the emulator, both delivery orders
#               and with failures (BENCH_ITEMS=100000 for 10^5 items;
#               BENCH_ONLY=regexp for some scenarios; a full run writes docs/design/cost.md's
#               tables: make bench-docs); make bench-go: Go benchmarks
#
# The emulator is MiniStack (pinned in localstack/requirements.txt, installed
# into .venv); the aws-cdk CLI is pinned in tools/cdk/package.json.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

GO        ?= go
FUNCTIONS := submit item finalize sweep setup
TARGET    ?= emulator
STACK     ?= bulkrun
# Functions run on the host's architecture on the emulator, arm64 on AWS.
ifeq ($(TARGET),aws)
GOARCH_FN := arm64
else
GOARCH_FN := $(shell $(GO) env GOARCH)
endif

EMULATOR_PORT ?= $(or $(BULKRUN_EMULATOR_PORT),4566)
# Node.js 20 is past its end of life; the pinned aws-cdk CLI works on it.
# Its three notices about that (jsii's two, and the AWS SDK for
# JavaScript's NodeVersionSupportWarning, once per cdk command) are
# silenced here; Node.js 22 or later needs none of this.
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED := true
export CDK_DISABLE_CLI_TELEMETRY := true
export BULKRUN_EMULATOR_PORT := $(EMULATOR_PORT)
ifeq ($(TARGET),emulator)
# The emulator: its endpoint and its fixed account, region and credentials.
export AWS_ENDPOINT_URL ?= http://localhost:$(EMULATOR_PORT)
export AWS_ACCESS_KEY_ID ?= test
export AWS_SECRET_ACCESS_KEY ?= test
export AWS_REGION ?= us-east-1
export AWS_DEFAULT_REGION ?= $(AWS_REGION)
export CDK_DEFAULT_ACCOUNT ?= 000000000000
export CDK_DEFAULT_REGION ?= $(AWS_REGION)
EMULATOR_DEP := emulator
FIXUP := $(GO) run ./localstack/fixup -stack $(STACK)
BOOTSTRAP_ENV := aws://$(CDK_DEFAULT_ACCOUNT)/$(CDK_DEFAULT_REGION)
else
# Real AWS: the account, region and credentials of your environment.
EMULATOR_DEP :=
FIXUP := @true
BOOTSTRAP_ENV :=
endif

CDK := $(CURDIR)/tools/cdk/node_modules/.bin/cdk
# golangci-lint, pinned; `go run pkg@version` fetches, builds and caches
# it. Its configuration, the import rules among it: .golangci.yml.
GOLANGCI_LINT := $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
# Extra CDK context for synth and deploy, e.g. CDK_CONTEXT='-c itemTimeout=30s'.
# What PIPELINES, LAMBDA_FUNCTIONS and the integration target add to it
# is added with `override`, so that a CDK_CONTEXT given on the command
# line keeps them.
CDK_CONTEXT ?=
# PIPELINES=a,b narrows the pipelines submit accepts to some of the
# built-ins and PIPELINE_MODULE's (default: all of them).
PIPELINES ?=
ifneq ($(strip $(PIPELINES)),)
override CDK_CONTEXT += -c pipelines=$(PIPELINES)
endif
# LAMBDA_FUNCTIONS=score,arn:aws:lambda:… allow-lists the Lambda functions
# the `lambda` pipeline may call (context lambdaFunctions, prop
# LambdaFunctions; docs/pipelines.md "Pipelines in any language"). Default:
# none on AWS, bulkrun-example-python (the integration suite's) on the
# emulator; naming others replaces it.
LAMBDA_FUNCTIONS ?=
ifneq ($(strip $(LAMBDA_FUNCTIONS)),)
override CDK_CONTEXT += -c lambdaFunctions=$(LAMBDA_FUNCTIONS)
endif
# Go pipelines of your own: PIPELINE_MODULE is a Go module (a folder with
# its go.mod) whose package PIPELINE_MAIN calls function.Start with your
# pipelines' declarations (docs/pipelines.md "Write your own pipeline"). `make
# functions` builds it into build/pipeline-code/bootstrap and writes the
# names it declares (`PIPELINE_MAIN pipelines`) beside it; the stack deploys
# it as the submit and item functions (context pipelineCode and
# customPipelines). Default: the example team module in examples/embed
# (pipeline "enrich") on the emulator; PIPELINE_MODULE= deploys bulkrun's
# own submit and item (built-in pipelines only), the default on AWS.
# On AWS (TARGET=aws) the default is none: the example is never shipped as
# a production stack's submit and item unless PIPELINE_MODULE names it.
ifeq ($(TARGET),aws)
PIPELINE_MODULE ?=
else
PIPELINE_MODULE ?= examples/embed
endif
PIPELINE_MAIN   ?= ./runner
PIPELINE_CODE   := build/pipeline-code
ifneq ($(strip $(PIPELINE_MODULE)),)
PIPELINE_CONTEXT = -c pipelineCode=../$(PIPELINE_CODE) -c customPipelines=$$(paste -sd, ../$(PIPELINE_CODE)/pipelines)
else
PIPELINE_CONTEXT =
endif
# Go modules besides the root that lint and unit cover (`./...` at the root
# does not descend into a nested module).
MODULES := examples/embed

.PHONY: all tools python-client python-test template template-test golangci-lint emulator emulator-stop functions cli synth deploy demo test lint unit integration console-test soak soak-short soak-cancel soak-slow fair-share bench bench-docs bench-go clean lambda-function

all: functions

IAM_LANE := tools/iam/node_modules/@cloud-copilot/iam-simulate/package.json
LINTERS  := tools/lint/.venv/bin/checkov

PY_CLIENT := clients/python
PY_VENV   := $(PY_CLIENT)/.venv/.installed

tools: .venv/bin/ministack $(CDK) $(IAM_LANE) $(LINTERS) $(PY_VENV) golangci-lint
	$(GO) mod download

# golangci-lint built into Go's build cache (under `make -j tools`, beside
# the other installs), so that make lint's `go run` starts it at once.
golangci-lint:
	$(GOLANGCI_LINT) version

.venv/bin/ministack: localstack/requirements.txt
	bash localstack/ministack.sh install
	touch $@

$(CDK): tools/cdk/package.json tools/cdk/package-lock.json
	cd tools/cdk && npm ci --no-audit --no-fund
	touch $@

# The IAM-checked lane's evaluator (integration/testbed/iamlane), pinned in
# tools/iam/package.json with its lock file.
$(IAM_LANE): tools/iam/package.json tools/iam/package-lock.json
	cd tools/iam && npm ci --no-audit --no-fund
	touch $@

# The template linters (cfn-lint with the serverless rules, checkov),
# pinned in tools/lint/requirements.txt, in their own virtualenv.
$(LINTERS): tools/lint/requirements.txt
	python3 -m venv tools/lint/.venv
	tools/lint/.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tools/lint/requirements.txt
	touch $@

# The Python client (clients/python, docs/python.md) in its own
# virtualenv: every package pinned in its requirements.txt (installed
# without their dependencies, then pip check: a dependency left unpinned
# fails), the client itself editable.
python-client: $(PY_VENV)
$(PY_VENV): $(PY_CLIENT)/requirements.txt $(PY_CLIENT)/pyproject.toml
	python3 -m venv $(PY_CLIENT)/.venv
	$(PY_CLIENT)/.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r $(PY_CLIENT)/requirements.txt
	$(PY_CLIENT)/.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e $(PY_CLIENT)
	$(PY_CLIENT)/.venv/bin/python -m pip check
	touch $@

# The Python client's type check (mypy --strict) and tests: the unit
# tests (no emulator; a loopback stand-in answers with shared/wire's
# golden answers) and the emulator tests on the deployed stack (make
# deploy first; under CI=true they fail without AWS_ENDPOINT_URL), every
# request and answer checked against docs/openapi.yaml. Seconds. Then
# the emulator launcher's own tests (localstack/*_test.py: the fair
# queues it delivers by), in the emulator's virtualenv.
python-test: $(PY_VENV) .venv/bin/ministack
	cd $(PY_CLIENT) && .venv/bin/mypy
	cd $(PY_CLIENT) && .venv/bin/python -m pytest -q -p no:cacheprovider
	cd localstack && ../.venv/bin/python -m unittest discover -s . -p '*_test.py'

emulator: .venv/bin/ministack
	bash localstack/ministack.sh start

emulator-stop:
	bash localstack/ministack.sh stop

functions:
	@mkdir -p build/functions
	@for f in $(FUNCTIONS); do \
	  echo "build $$f (linux/$(GOARCH_FN))"; \
	  GOOS=linux GOARCH=$(GOARCH_FN) CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags=-s \
	    -o build/functions/$$f/bootstrap ./functions/$$f; \
	done
ifneq ($(strip $(PIPELINE_MODULE)),)
	@echo "build $(PIPELINE_MODULE) $(PIPELINE_MAIN) (linux/$(GOARCH_FN)) as submit and item"
	@mkdir -p $(PIPELINE_CODE)
	cd $(PIPELINE_MODULE) && GOOS=linux GOARCH=$(GOARCH_FN) CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags=-s \
	  -o $(abspath $(PIPELINE_CODE))/bootstrap $(PIPELINE_MAIN)
	cd $(PIPELINE_MODULE) && $(GO) run $(PIPELINE_MAIN) pipelines > $(abspath $(PIPELINE_CODE))/pipelines
	@echo "  declares: $$(paste -sd, $(PIPELINE_CODE)/pipelines)"
endif

cli:
	$(GO) build -trimpath -o build/bulkrun ./cmd/bulkrun

synth: tools functions
	cd infra && $(CDK) synth --output ../build/cdk.out --no-notices -q -c target=$(TARGET) -c functionsDir=../build/functions -c stackName=$(STACK) $(PIPELINE_CONTEXT) $(CDK_CONTEXT) > /dev/null

# template: the stack as a plain CloudFormation template, for teams not
# on CDK (infra/README.md, "Without CDK"): build/template/bulkrun.template.json
# (target TARGET; CDK_CONTEXT's settings baked in), its functions' code as
# build/template/functions/{submit,item,finalize,sweep,setup}.zip (bulkrun's own
# binaries: the built-in pipelines), and the parameters CodeBucket and
# CodeKeyPrefix naming where those zips are put. No CDK bootstrap needed.
TEMPLATE_DIR := build/template
template: tools functions
	rm -rf $(TEMPLATE_DIR) && mkdir -p $(TEMPLATE_DIR)/functions
	cd infra && $(CDK) synth --output ../$(TEMPLATE_DIR)/cdk.out --no-notices -q -c target=$(TARGET) -c template=true \
	  -c functionsDir=../build/functions -c stackName=$(STACK) $(CDK_CONTEXT) > /dev/null
	cp $(TEMPLATE_DIR)/cdk.out/$(STACK).template.json $(TEMPLATE_DIR)/bulkrun.template.json
	for f in $(FUNCTIONS); do (cd build/functions/$$f && python3 -m zipfile -c $(CURDIR)/$(TEMPLATE_DIR)/functions/$$f.zip bootstrap); done
	@echo "template: $(TEMPLATE_DIR)/bulkrun.template.json ($$(wc -c < $(TEMPLATE_DIR)/bulkrun.template.json) bytes), zips in $(TEMPLATE_DIR)/functions/"

# template-test: make template, then the template deployed by plain
# CloudFormation on the emulator (CreateStack from S3, the zips in a code
# bucket of the test's own), a batch run through its API, the stack
# deleted (integration/template_test.go, build tag template).
template-test: template $(EMULATOR_DEP)
	$(GO) test -tags 'integration template' -count=1 -timeout 10m -run '^TestTemplate' -v ./integration/

# deploy synthesizes the stack once (build/cdk.out), bootstraps, runs the
# preflight against the account about to receive it, and deploys that
# very assembly. The preflight (`bulkrun doctor --preflight`,
# docs/operations.md "Before the first deploy") reads the synthesized
# template and the account's answers — API Gateway's CloudWatch role,
# Lambda's concurrency quota, the source buckets' Regions and encryption,
# the alarm topic's key and policy — and refuses, naming the fix, a deploy
# that would fail or silently degrade; on the emulator the account's own
# findings are informational. SKIP_PREFLIGHT=1 prints the findings and
# deploys anyway.
SKIP_PREFLIGHT ?=
PREFLIGHT_FLAGS = --preflight --stack $(STACK) --target $(TARGET) --template build/cdk.out/$(STACK).template.json \
  $(if $(filter 1 true yes,$(SKIP_PREFLIGHT)),--skip-preflight)
deploy: tools $(EMULATOR_DEP) functions cli
	cd infra && $(CDK) synth --output ../build/cdk.out --no-notices -q -c target=$(TARGET) \
	  -c functionsDir=../build/functions -c stackName=$(STACK) $(PIPELINE_CONTEXT) $(CDK_CONTEXT) > /dev/null
	cd infra && $(CDK) bootstrap $(BOOTSTRAP_ENV) --app ../build/cdk.out --no-notices
	build/bulkrun doctor $(PREFLIGHT_FLAGS)
	cd infra && $(CDK) deploy --app ../build/cdk.out --require-approval never --no-notices --outputs-file ../build/outputs.json
	$(FIXUP)

# A team's Python function onto the emulator, for the `lambda` pipeline:
# every .py file of FUNCTION_DIR as FUNCTION (python3.12, FUNCTION_HANDLER),
# created or its code replaced. Then `make deploy LAMBDA_FUNCTIONS=…` lets
# the stack call it. On AWS, deploy the function with your own tooling.
FUNCTION         ?= bulkrun-example-python
FUNCTION_DIR     ?= examples/lambda-python
FUNCTION_HANDLER ?= handler.handler
lambda-function: $(EMULATOR_DEP)
	$(GO) run ./localstack/pyfunc -name $(FUNCTION) -dir $(FUNCTION_DIR) -handler $(FUNCTION_HANDLER)

# Under the IAM-checked lane (BULKRUN_IAM_LANE=1, localstack/README.md) the
# demo's calls are checked too: the lane's record is cleared first and
# printed after, and any denial fails the target.
demo: deploy
	@if [ "$${BULKRUN_IAM_LANE:-0}" = 1 ]; then $(GO) run ./integration/testbed/cmd/faultproxy -iam-report $(AWS_ENDPOINT_URL) -iam-reset > /dev/null || true; fi
	$(GO) run ./examples/thumbnails -stack $(STACK) -out demo-output
	@if [ "$${BULKRUN_IAM_LANE:-0}" = 1 ]; then $(GO) run ./integration/testbed/cmd/faultproxy -iam-report $(AWS_ENDPOINT_URL); fi

# lint runs golangci-lint (.golangci.yml: the import rules, funlen,
# go vet, staticcheck, gofmt and goimports; the integration suite's files
# among the rest) on the root module and on $(MODULES), then synthesizes
# the default, all-options and embed templates and runs cfn-lint
# (serverless rules) and checkov on each: tools/lint/lint-templates.
lint: tools functions
	$(GOLANGCI_LINT) run ./...
	for m in $(MODULES); do (cd $$m && $(GOLANGCI_LINT) run ./...); done
	bash tools/lint/lint-templates

unit:
	$(GO) vet ./...
	$(GO) test -count=1 ./...
	for m in $(MODULES); do (cd $$m && $(GO) vet ./... && $(GO) test -count=1 ./...); done

# The suite's stack retries transient errors within seconds (TEST_RETRY),
# not the product's 5-minute default meant for AWS downstream outages
# (docs/design/items.md, "Retry policy"); a batch's own policy still wins.
TEST_RETRY = -c retryPolicy=interval_seconds=1,backoff_rate=2,max_delay_seconds=20,jitter=0.5
integration: override CDK_CONTEXT += $(TEST_RETRY)
# Under the IAM-checked lane the suite fails on a denial itself; the
# lane's record of the run is printed after it. Its parallel tests
# (integration/main_test.go) mostly wait on the emulator: 16 run at once
# (more starve a 2-vCPU machine's emulator, the in-process harnesses and
# the functions, and tests that drain their queue within a deadline
# fail). The suite took 865 s on a 2-vCPU machine running nothing else
# and 1,233 s beside other work (go test -json): its timeout leaves room
# for a loaded machine. Its longest waits: the serial tests (721 s beside
# other work on 2026-12-06, six of them 60–91 s each) before the
# parallel ones (325 s). Only the packages
# with tests under the integration tag run here: the test bed's others
# (the flow bed's 40 s among them) ran in make test's go test ./...,
# and run again beside the suite they only took its CPU.
INTEGRATION_PKGS = ./integration/ $(addprefix ./,$(sort $(dir $(shell grep -rl --include='*_test.go' '^//go:build.*integration' integration/testbed))))
integration: deploy
	$(GO) test -tags integration -count=1 -timeout 35m -parallel 16 $(INTEGRATION_PKGS)
	@if [ "$${BULKRUN_IAM_LANE:-0}" = 1 ]; then $(GO) run ./integration/testbed/cmd/faultproxy -iam-report $(AWS_ENDPOINT_URL); fi

# The Python client's tests (python-test) run on the stack integration
# deployed, before soak-short deploys it again with its own timeouts.
test: lint unit integration python-test soak-short

# The web console in headless Chromium over the deployed stack (also part
# of `make integration`; skipped there when no Chromium is installed,
# except under CI=true). Saves screenshots to build/console/
# (CONSOLE_SHOTS=docs/console refreshes those docs/console.md shows).
CONSOLE_SHOTS ?= build/console
console-test: deploy
	BULKRUN_CONSOLE_SHOTS=$(CURDIR)/$(CONSOLE_SHOTS) $(GO) test -tags integration -count=1 -timeout 10m -run '^TestConsoleBrowser$$' -v ./integration/

# soak: opt-in, not part of `make test`. 5,000 items through the deployed
# stack behind the fault proxy (5 % faults on the functions' DynamoDB, SQS
# and S3 calls, duplicate deliveries, two crash windows); prints the census,
# the pipeline calls and the injected faults by kind. The emulator must be
# started by this target (or with BULKRUN_FAULT_PROXY=1). Bounded: the run
# is given BULKRUN_SOAK_LIMIT (20 min), the test SOAK_TIMEOUT; it takes ≈ 10
# min on a 2-vCPU machine. See docs/design/faults.md, "Faults and the soak".
SOAK_TIMEOUT ?= 30m
soak: export BULKRUN_FAULT_PROXY := 1
soak:
	$(MAKE) deploy CDK_CONTEXT='-c itemTimeout=30s $(TEST_RETRY)'
	$(GO) test -tags 'integration soak' -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' -v ./integration/

# soak-short: part of `make test`. The soak's fault mix and both crash
# windows on SOAK_SHORT_ITEMS (400) items, ≈ 1–3 minutes (bounded to 7):
# the stack is deployed with a 12 s item timeout (the shortest whose 6×
# visibility timeout covers the lease; killed invocations'
# messages come back after the 72 s visibility timeout; outcomes written
# but not counted are counted from the rows once the counters stood still
# for a lease, 72 s) and a finalize tick every minute, and the windows
# open early (the kill at 10 % of the items, outcome writes lost from 20 %
# to 80 %) so that their recoveries overlap. Most of the 3 minutes is the
# wait for the visibility timeout, then for the counters to stand still a
# lease and the next tick (outcomes written by a killed invocation are not
# counted on redelivery; docs/design/items.md, "Known limits"). The bound
# covers the longest chain of those recoveries the fault mix makes: a
# redelivery that itself waits out the visibility timeout again (an
# injected fault on its SQS calls) twice, 1 + 3 × 72 s, its attempt
# (≤ 12 s), then the lease's stand-still (72 s) and the tick (≤ 60 s):
# ≈ 360 s, with the submit and the finalize a minute to spare. It needs the
# emulator behind the fault proxy (BULKRUN_FAULT_PROXY=1 when it was
# started, as .ci/run does) and is skipped without it, except under
# CI=true or BULKRUN_FAULT_PROXY=1, where it fails; the next `make
# deploy` puts the default timeouts back.
SOAK_SHORT_ITEMS ?= 400
soak-short:
	$(MAKE) deploy CDK_CONTEXT='-c itemTimeout=12s -c finalizeTickSchedule="rate(1 minute)" $(TEST_RETRY)'
	BULKRUN_SOAK_ITEMS=$(SOAK_SHORT_ITEMS) BULKRUN_SOAK_LIMIT=7m BULKRUN_SOAK_KILL_AT=10 BULKRUN_SOAK_LOSE_FROM=20 BULKRUN_SOAK_LOSE_TO=80 \
	  $(GO) test -tags 'integration soak' -count=1 -timeout 9m -run '^TestSoak$$' -v ./integration/

# soak-cancel: opt-in, not part of `make test`. A webhook batch of
# CANCEL_ITEMS (3,000) items whose receiver answers after 5 s, cancelled
# through the API when half of them succeeded, then resumed
# (integration/cancel_soak_test.go): the receiver's own log shows no call
# started after the cancel answered (the calls after the moment the stop
# was read back from the row are counted and shown), one call per
# succeeded item, the rest cancelled, and a resume calling exactly the
# cancelled keys once. Prints a table of the figures. The stack is
# deployed with the suite's retry policy; CANCEL_CONCURRENCY sets the item
# event sources' maximum concurrency (context itemsMaxConcurrency; the
# stack's default, 100, when empty). On a busy 2-vCPU machine 3,000 items
# take ≈ 1.5 minutes, CANCEL_ITEMS=20000 4 to 9.
CANCEL_ITEMS       ?= 3000
CANCEL_CONCURRENCY ?=
SOAK_CANCEL_TIMEOUT ?= 60m
soak-cancel:
	$(MAKE) deploy CDK_CONTEXT='$(TEST_RETRY)$(if $(CANCEL_CONCURRENCY), -c itemsMaxConcurrency=$(CANCEL_CONCURRENCY))'
	BULKRUN_CANCEL_ITEMS=$(CANCEL_ITEMS) $(GO) test -tags 'integration soak' -count=1 -timeout $(SOAK_CANCEL_TIMEOUT) -run '^TestCancelAtHalf$$' -v ./integration/

# fair-share: the fair share between batches on the emulator, by the
# receiver's own log (integration/fairshare_test.go): a 50-item batch
# behind a 3,000-item backlog, and a priority-3 batch beside a
# priority-1 one. The stack is deployed again with its item event
# source's maximum concurrency at FAIR_CONCURRENCY (3: 30 messages in
# flight), so that what the queue hands out first runs first on a
# 2-core machine; the emulator delivers as SQS fair queues do
# (localstack/README.md, "Fair queues"). About a minute.
FAIR_CONCURRENCY ?= 3
fair-share:
	$(MAKE) deploy CDK_CONTEXT='$(TEST_RETRY) -c itemsMaxConcurrency=$(FAIR_CONCURRENCY)'
	BULKRUN_FAIR_SHARE=1 $(GO) test -tags integration -count=1 -timeout 10m -run '^(TestFairShareOnTheStack|TestPriorityShareOnTheStack)$$' -v ./integration/

# soak-slow: opt-in, not part of `make test`. A webhook batch of
# SLOW_ITEMS (3,000) items with the webhook's default timeout_ms (10 s)
# whose receiver finishes every call but takes SLOW_SECONDS (20) over the
# calls that start in the first SLOW_FOR (3 minutes) of the run, then
# answers at once (integration/slow_soak_test.go): the report's run_spent
# calls equal the calls the receiver got, timed-out ones included; no
# item's call starts while its earlier call still works at the receiver;
# the live view counts the timed-out attempts; every item succeeds.
# SLOW_SECONDS=0: no call is slow, one call per item. Prints a table of
# the figures. The stack is deployed with the suite's retry policy.
SLOW_ITEMS   ?= 3000
SLOW_SECONDS ?= 20
SLOW_FOR     ?= 3m
SOAK_SLOW_TIMEOUT ?= 60m
soak-slow:
	$(MAKE) deploy CDK_CONTEXT='$(TEST_RETRY)'
	BULKRUN_SLOW_ITEMS=$(SLOW_ITEMS) BULKRUN_SLOW_SECONDS=$(SLOW_SECONDS) BULKRUN_SLOW_FOR=$(SLOW_FOR) $(GO) test -tags 'integration soak' -count=1 -timeout $(SOAK_SLOW_TIMEOUT) -run '^TestSlowReceiver$$' -v ./integration/

BENCH_ITEMS ?= 2000

# Runs of BENCH_ITEMS items of 1 KB in-process against the emulator's
# storage: small and ~1 KB outputs, 1, 10 and 100 items per message, each
# with the queue chunk-ordered and shuffled (as SQS standard queues
# deliver), runs with max_concurrency 10 at 1 and 10 items per message
# (at 10, with its twin without the limit, again at 10 × BENCH_ITEMS in
# the product's 5,000-item chunks), and shuffled runs with 5 % transient
# + 5 % permanent and with 100 % permanent failures; prints them, the
# partition table and the failures beside their clean runs, and writes
# build/bench/cost.json.
# A run of every scenario (BENCH_ONLY empty) then writes the cost tables of
# docs/design/cost.md from it and keeps it as docs/design/cost.json
# (make bench-docs), naming the head it ran on (-dirty: with code changes
# not committed); TestCostDocIsTheMeasurement holds the tables to it.
BENCH_ONLY ?=
BENCH_HEAD = $(shell git rev-parse --short HEAD)$(shell git diff --quiet HEAD -- . ':(exclude)docs' || echo -dirty)
bench: tools $(EMULATOR_DEP)
	$(GO) run ./integration/testbed/cmd/bench -items $(BENCH_ITEMS) -only '$(BENCH_ONLY)' -out build/bench/cost.json
	$(if $(BENCH_ONLY),,$(MAKE) bench-docs)

bench-docs:
	$(GO) run ./integration/testbed/cmd/benchdocs -in build/bench/cost.json -head $(BENCH_HEAD)

# BENCHTIME: go test's -benchtime (CI: 1x, every benchmark once).
BENCHTIME ?= 1s
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./shared/... ./internal/... ./integration/testbed/...

clean:
	rm -rf build cdk.out infra/cdk.out demo-output
