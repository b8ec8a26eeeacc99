package injector

import (
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hostileAnnotations are rules annotations the API server admits (at most
// 256 KiB of annotations in all) built to make a YAML decoder spend time
// or memory out of proportion to their size.
func hostileAnnotations() map[string]string {
	keys := func(n int, format string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, format, i)
		}
		return b.String()
	}
	fits := func(s string, unit int) string { // as many units as fit under 256 KiB
		for len(s) > 250<<10 {
			s = s[:len(s)-unit]
		}
		return s
	}
	return map[string]string{
		"2000 repeated containers": strings.Repeat("app: {}\n", 2000),
		"repeated keys, 256 KiB":   fits(strings.Repeat("app: {}\n", 40000), 8),
		"repeated fields":          "app:\n" + strings.Repeat("  restartPolicy: Never\n", 2000),
		"distinct containers":      keys(6000, "c%d: {}\n"),
		"distinct keys, 256 KiB":   fits(keys(30000, "c%05d: {}\n"), 10),
		"distinct fields":          "app:\n" + keys(6000, "  f%d: 1\n"),
		"map where a list goes":    "app:\n  restartPolicy: Never\n  restartPolicyRules:\n" + keys(6000, "    k%d: 1\n"),
		"map where a value goes":   "app:\n  restartPolicy:\n" + keys(6000, "    k%d: 1\n"),
		"long rule list":           "app: {restartPolicy: Never, restartPolicyRules: [" + strings.Repeat("{action: Restart},", 3000) + "]}",
		"long exit code list":      "app: {restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [" + strings.Repeat("1,", 30000) + "1]}}]}",
		"deep nesting":             strings.Repeat("[", 60000),
		"long container name":      strings.Repeat("x", 60000) + ": {}",
		"long syntax error":        "app: {" + strings.Repeat("x", 60000) + ": [}",
		"aliases":                  "a: &a [1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b,*b,*b]\n",
	}
}

// TestRulesAnnotationHostileBounded: every annotation the API server can
// send is answered within 100 ms of CPU and 32 MiB of allocation, with a
// short one-line error.
func TestRulesAnnotationHostileBounded(t *testing.T) {
	for name, v := range hostileAnnotations() {
		t.Run(name, func(t *testing.T) {
			ann := map[string]string{contract.AnnotationRules: v}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			c0, w0 := cpuTime(), time.Now()
			_, err := parseRulesAnnotation(ann)
			cpu, wall := cpuTime()-c0, time.Since(w0)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d bytes: cpu %v wall %v, %d KiB allocated, err %.150v", len(v), cpu, wall, alloc>>10, err)
			if err == nil {
				return // distinct containers, to be matched against the pod
			}
			if msg := err.Error(); len(msg) > 1200 || strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error of %d bytes, want one line of at most 1200", len(msg))
			}
			// CPU time counts the whole process, and wall time the
			// machine's load: only when both are over is it the parse.
			if cpu > 100*time.Millisecond && wall > 100*time.Millisecond {
				t.Errorf("took %v of CPU", cpu)
			}
			if alloc > 32<<20 {
				t.Errorf("allocated %d MiB", alloc>>20)
			}
		})
	}
}

func TestRulesAnnotationErrorsNameTheField(t *testing.T) {
	const field = "metadata.annotations[restart-supervisor.dev/rules]: "
	for v, want := range map[string]string{
		"app: {}\napp: {}\n": `line 2: mapping key "app" already defined at line 1`,
		"app: {restartPolicy: Never, restartPolicy: Never}":         `line 1: mapping key "restartPolicy" already defined at line 1`,
		"app: {restartPolicyRules: {a: 1}}":                         `line 1: app.restartPolicyRules: must be a list`,
		"app: {restartPolicyRules: [{exitCodes: {values: [[1]]}}]}": `line 1: app.restartPolicyRules[0].exitCodes.values[0]: must be a string`,
		"app: {restartPolicyRules: [{action: Restart, bogus: 1}]}":  `line 1: unknown field "bogus"`,
		"[app]":                          `line 1: must be a map from container name to {restartPolicy, restartPolicyRules}`,
		"{[a]: {}}":                      `line 1: container names: keys must be strings`,
		"a: &x {}\nb: *x\n":              `line 2: b: aliases are not supported`,
		strings.Repeat("y", 70) + ": {}": `line 1: container name "` + strings.Repeat("y", 61) + `…": must be no more than 63 bytes`,
		strings.Repeat("a", 70<<10):      `71680 bytes: must be at most 65536 bytes`,
		"app: {restartPolicyRules: [" + strings.Repeat("{},", 21) + "]}": `line 1: app.restartPolicyRules: Too many: 21: must have at most 20 items`,
	} {
		_, err := parseRulesAnnotation(map[string]string{contract.AnnotationRules: v})
		if err == nil || err.Error() != field+want {
			t.Errorf("%.40q:\n got %v\nwant %s", v, err, field+want)
		}
	}
	// The decoder still reports what only it checks.
	if _, err := parseRulesAnnotation(map[string]string{contract.AnnotationRules: "app: {restartPolicyRules: [{exitCodes: {values: [x]}}]}"}); err == nil ||
		!strings.Contains(err.Error(), "cannot unmarshal") {
		t.Errorf("exit code x: %v", err)
	}
	m, err := parseRulesAnnotation(map[string]string{contract.AnnotationRules: `{"app": {"restartPolicy": "Never", "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}, "side": null}`})
	if err != nil || len(m) != 2 || *m["app"].RestartPolicy != "Never" || m["app"].RestartPolicyRules[0].ExitCodes.Values[0] != 42 {
		t.Errorf("valid annotation: %v %+v", err, m)
	}
}
