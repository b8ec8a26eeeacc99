package rules

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// hostileConfigs are documents built to make a YAML decoder spend time or
// memory out of proportion to their size.
func hostileConfigs() map[string]string {
	distinct := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "k%d: 1\n", i)
		}
		return b.String()
	}
	return map[string]string{
		// yaml.v3 compares every pair of keys and keeps one error
		// message per duplicate pair.
		"2000 repeated keys":    strings.Repeat("restartPolicy: Never\n", 2000),
		"repeated nested keys":  "backoff:\n" + strings.Repeat("  initial: 1s\n", 2000),
		"60000 distinct keys":   distinct(60000),
		"60 KiB of list items":  "restartPolicy: Never\nrestartPolicyRules:\n" + strings.Repeat("- {action: Restart, exitCodes: {operator: In, values: [1]}}\n", 1000),
		"long exit code list":   "restartPolicy: Never\nrestartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [" + strings.Repeat("1,", 30000) + "1]}}]",
		"long value":            "restartPolicy: " + strings.Repeat("x", 60000),
		"long key":              strings.Repeat("x", 60000) + ": 1",
		"long invalid rules":    "restartPolicy: Never\nrestartPolicyRules:\n" + strings.Repeat("- {action: "+strings.Repeat("x", 50)+"}\n", 1000),
		"deep nesting":          strings.Repeat("[", 30000),
		"256 KiB":               "# " + strings.Repeat("x", 256<<10) + "\nrestartPolicy: Never\n",
		"1 MiB of repeated key": strings.Repeat("restartPolicy: Never\n", 50000),
	}
}

// TestParseHostileBounded: whatever the document, Parse answers within a
// bounded time and memory with a short one-line error.
func TestParseHostileBounded(t *testing.T) {
	for name, doc := range hostileConfigs() {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := Parse([]byte(doc))
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d bytes: %v, %d KiB allocated, err %.120v", len(doc), elapsed, alloc>>10, err)
			if err == nil {
				t.Fatalf("accepted")
			}
			if msg := err.Error(); len(msg) > maxErrorLen || strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error of %d bytes, want one line of at most %d", len(msg), maxErrorLen)
			}
			// Generous against a loaded machine; the bound that matters
			// is that the cost no longer grows with the square of the
			// input.
			if elapsed > 500*time.Millisecond {
				t.Errorf("took %v", elapsed)
			}
			if alloc > 32<<20 {
				t.Errorf("allocated %d MiB", alloc>>20)
			}
		})
	}
}

func TestParseRejectsDuplicateKeys(t *testing.T) {
	for doc, want := range map[string]string{
		"restartPolicy: Never\nrestartPolicy: Always\n":                                       `config: restartPolicy: Duplicate value (line 2): already set at line 1`,
		"backoff: {initial: 1s, initial: 2s}":                                                 `config: backoff.initial: Duplicate value (line 1): already set at line 1`,
		"restartPolicy: Never\n" + "restartPolicyRules: [{action: Restart, action: Restart}]": `config: restartPolicyRules[0].action: Duplicate value (line 2): already set at line 2`,
	} {
		if _, err := Parse([]byte(doc)); err == nil || err.Error() != want {
			t.Errorf("%q:\n got %v\nwant %s", doc, err, want)
		}
	}
}

func TestParseSizeCap(t *testing.T) {
	doc := "restartPolicy: Never\n#" + strings.Repeat("x", MaxConfigSize)
	_, err := Parse([]byte(doc))
	want := fmt.Sprintf("config: %d bytes: larger than %d bytes", len(doc), MaxConfigSize)
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	// A document right at the cap is read.
	doc = "restartPolicy: Never\n#" + strings.Repeat("x", MaxConfigSize-len("restartPolicy: Never\n#"))
	if _, err := Parse([]byte(doc)); err != nil {
		t.Fatalf("document of %d bytes: %v", len(doc), err)
	}
}
