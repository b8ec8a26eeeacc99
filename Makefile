VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: build example test bench clean

build:
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/restart-supervisor ./cmd/restart-supervisor
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/restart-injector ./cmd/restart-injector

example:
	examples/run.sh

test:
	hack/test.sh

clean:
	rm -rf bin
