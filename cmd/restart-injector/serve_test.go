package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Usage errors of serve are one line on stderr and exit status 2, before
// anything listens.
func TestServeUsageErrors(t *testing.T) {
	if os.Getenv("SERVE_USAGE_CHILD") != "" {
		os.Exit(runServe(context.Background(), strings.Fields(os.Getenv("SERVE_USAGE_CHILD")), os.Stderr))
	}
	for _, tc := range []struct{ args, want string }{
		{"--native=maybe", `--native: "maybe" is not one of off, auto, on`},
		{"--cert-mode=vault", `--cert-mode: "vault" is not one of files, self`},
		{"--on-entrypoint-error=ignore", `--on-entrypoint-error: "ignore" is not one of deny, allow`},
		{"--image-pull-policy=Sometimes", `--image-pull-policy: "Sometimes" is not one of Always, IfNotPresent, Never`},
		{"--volume-medium=HugePages", `--volume-medium: "HugePages" is not one of "", Memory`},
		{"--log-format=xml", `--log-format: "xml" is not one of json, text`},
		{"--self-signed --native=off --registry-lookup=false", "--namespace is required outside a pod"},
		{"--insecure-registry=https://r.test", `invalid argument "https://r.test" for "--insecure-registry" flag: registry "https://r.test": want HOST or HOST:PORT`},
		{"--allowed-registries=r.test,r.test/team", `invalid argument "r.test,r.test/team" for "--allowed-registries" flag: registry "r.test/team": want HOST or HOST:PORT`},
		{"extra", `unexpected argument "extra"`},
		{"--no-such-flag", "unknown flag: --no-such-flag"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestServeUsageErrors$")
		cmd.Env = append(os.Environ(), "SERVE_USAGE_CHILD="+tc.args, "POD_NAMESPACE=")
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != exitUsage {
			t.Errorf("serve %s: %v, want exit %d\n%s", tc.args, err, exitUsage, out)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("serve %s: output %q lacks %q", tc.args, out, tc.want)
		}
	}
}
