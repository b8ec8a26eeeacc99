VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Both binaries, and the images (docker build --build-arg VERSION=...), read
# the version from the one variable the supervisor and injector share.
LDFLAGS := -s -w -X github.com/restart-supervisor/restart-supervisor/contract.Version=$(VERSION)

.PHONY: build example test e2e-up e2e-down clean

build:
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/restart-supervisor ./cmd/restart-supervisor
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/restart-injector ./cmd/restart-injector

example:
	examples/run.sh

test:
	hack/test.sh

e2e-up:
	hack/e2e-up.sh

e2e-down:
	hack/e2e-down.sh

clean:
	rm -rf bin
