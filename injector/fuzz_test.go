package injector

import (
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

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
		"app: {watchdog: {heartbeatFile: /hb, outputPattern: 'step [0-9]+', stallSeconds: 10}, escalation: {window: 1h, steps: [{action: Restart, restarts: 2}, {action: RestartGroup, restarts: 1}]}}",
		"app: {escalation: {steps: [{action: 1, restarts: x}]}, watchdog: {stallSeconds: [1]}}",
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
