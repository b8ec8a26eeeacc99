package injector

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// FuzzReadManifests: the reader never panics, writing an untouched stream
// reproduces the input byte for byte, injecting whatever it read never
// panics either (errors are fine), and what inject wrote uninject takes
// back.
func FuzzReadManifests(f *testing.F) {
	files, _ := filepath.Glob("testdata/in/*")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("---\n---\n"))
	f.Add([]byte(`{"kind":"Pod"} {"a":1}`))
	f.Add([]byte("a: [1\n"))
	f.Add([]byte("--- # c\nkind: List\napiVersion: v1\nitems: [1, {kind: Pod, apiVersion: v1}]\n"))
	inj := New(Options{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _ := ReadManifests(data)
		if m == nil {
			return
		}
		// Documents that cannot be read are kept as they were: the
		// stream still round-trips.
		var out bytes.Buffer
		if _, err := m.WriteTo(&out); err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("round trip changed the stream:\n%q\n%q", data, out.Bytes())
		}
		if _, err := inj.InjectManifests(context.Background(), m); err == nil {
			out.Reset()
			if _, err := m.WriteTo(&out); err != nil {
				t.Fatalf("WriteTo after inject: %v", err)
			}
			// What inject wrote, uninject takes back without an error.
			back, _ := ReadManifests(out.Bytes())
			if back != nil {
				if _, err := UninjectManifests(back); err != nil {
					t.Fatalf("uninject of the injected stream: %v", err)
				}
			}
		}
	})
}

// FuzzRulesAnnotation feeds arbitrary text to the rules annotation parser.
// Whatever the input, it must not panic, an error must be one short line,
// and an accepted annotation names only containers Kubernetes can have.
func FuzzRulesAnnotation(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `app: {}`, "app: {}\napp: {}",
		`{"app": {"restartPolicy": "Never", "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}}`,
		"app:\n  restartPolicyRules:\n  - action: RestartAllContainers\n    exitCodes: {operator: NotIn, values: [0]}\n",
		"a: &a {}\nb: *a", "app: {restartPolicy: [x]}", "app: {restartPolicyRules: [{exitCodes: {values: [x]}}]}",
		"{[a]: {}}", "app: {<<: {restartPolicy: Never}}", "---\napp: {}\n---\nb: {}",
		"app: {restartBudget: {maxRestarts: 3, window: 10m}, handOverExitCodes: [93], preRestartCheck: {command: [c, -x], timeoutSeconds: 5}, progress: {file: /p, maxStalledRestarts: 2}}",
		"app: {backoff: {initial: 1s, max: 60s}}", "app: {backoff: {max: x}}", "app: {backoff: {initial: -5ns}}",
		"app: {restartBudget: {window: soon}}", "app: {preRestartCheck: {command: x}}", "app: {restartBudget: {maxRestarts: [1]}}",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		m, err := parseRulesAnnotation(map[string]string{contract.AnnotationRules: v})
		if err != nil {
			if msg := err.Error(); len(msg) > 1200 || strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("error is not one short line: %d bytes: %.200q", len(msg), msg)
			}
			return
		}
		for name := range m {
			if len(name) > maxContainerName {
				t.Fatalf("accepted a container name of %d bytes", len(name))
			}
		}
	})
}
