package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

func intPtr(i int) *int { return &i }

func TestFormatTableAndJSON(t *testing.T) {
	now := time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC)
	st := []statevol.Status{
		{Container: "app", State: contract.PhaseRunning, Restarts: 2, PodRestarts: 1,
			LastExit:  &statevol.Exit{Code: 42, Rule: intPtr(1), Action: rules.ActionRestartAllContainers},
			StartedAt: now.Add(-90 * time.Second), UpdatedAt: now.Add(-90 * time.Second)},
		{Container: "side", State: contract.PhaseBackingOff, Restarts: 1, LastExit: &statevol.Exit{Code: 137, Signal: "SIGKILL", PodRestart: 3},
			NextStartAt: now.Add(10 * time.Second), StartedAt: now.Add(-2 * time.Hour), UpdatedAt: now},
	}
	var b bytes.Buffer
	if err := formatTable(&b, st, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want header and 2 rows:\n%s", b.String())
	}
	for _, want := range [][]string{
		{"CONTAINER", "STATE", "RESTARTS", "POD RESTARTS", "LAST EXIT", "RULE", "ACTION", "STARTED", "UPDATED"},
		{"app", "running", "2", "1", "42", "1", "RestartAllContainers", "1m30s ago"},
		{"side", "backoff (10s)", "1", "0", "137 (SIGKILL)", "-", "pod restart 3", "2h0m0s ago", "0s ago"},
	} {
		line := lines[0]
		for _, l := range lines {
			if strings.HasPrefix(l, want[0]) {
				line = l
			}
		}
		for _, cell := range want {
			if !strings.Contains(line, cell) {
				t.Errorf("row %q lacks %q", line, cell)
			}
		}
	}
	b.Reset()
	if err := formatJSON(&b, st); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Containers []statevol.Status `json:"containers"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Containers) != 2 || doc.Containers[1].LastExit.Signal != "SIGKILL" {
		t.Fatalf("JSON: %s", b.String())
	}
	b.Reset()
	formatJSON(&b, nil)
	if strings.TrimSpace(b.String()) != "{\n  \"containers\": []\n}" {
		t.Fatalf("empty JSON: %q", b.String())
	}
}

func TestStatusCommand(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := statusCmd(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, stderr := run("--state-dir", dir); code != statusIncomplete || !strings.Contains(stderr, "no supervised container") {
		t.Fatalf("empty dir: %d %q", code, stderr)
	}
	statevol.WriteStatus(dir, statevol.Status{Container: "b", State: contract.PhaseRunning, Restarts: 4})
	statevol.WriteStatus(dir, statevol.Status{Container: "a", State: contract.PhaseHolding})
	code, out, _ := run("--state-dir", dir)
	if code != statusOK || strings.Index(out, "a ") > strings.Index(out, "b ") || !strings.Contains(out, "held") {
		t.Fatalf("table: %d\n%s", code, out)
	}
	t.Setenv("RESTART_SUPERVISOR_STATE_DIR", dir)
	code, out, _ = run("--json")
	var doc struct{ Containers []statevol.Status }
	if code != statusOK || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Containers) != 2 || doc.Containers[1].Restarts != 4 {
		t.Fatalf("json via env: %d %s", code, out)
	}
	if code, _, stderr := run("--bogus"); code != statusUsage || !strings.Contains(stderr, "bogus") {
		t.Fatalf("bad flag: %d %q", code, stderr)
	}
	if code, _, stderr := run("extra"); code != statusUsage || !strings.Contains(stderr, "extra") {
		t.Fatalf("extra arg: %d %q", code, stderr)
	}
	if code, _, stderr := run("--state-dir", filepath.Join(dir, "nope")); code != statusIncomplete || !strings.Contains(stderr, "nope") {
		t.Fatalf("missing dir: %d %q", code, stderr)
	}
	os.WriteFile(filepath.Join(dir, "status", "c.json"), []byte("garbage"), 0o644)
	code, out, stderr := run()
	if code != statusIncomplete || !strings.Contains(stderr, "c.json") || !strings.Contains(out, "held") {
		t.Fatalf("broken document: %d %q %q", code, out, stderr)
	}
}

// Another container of the pod writes status documents (and names them)
// with terminal escape sequences: status prints none of them raw.
func TestStatusEscapesControlCharacters(t *testing.T) {
	dir := t.TempDir()
	sdir := filepath.Join(dir, "status")
	os.MkdirAll(sdir, 0o777)
	evil := "\x1b]0;owned\x07\x1b[2J\u009b31m\u202e\x7f\xff"
	doc := `{"container":"x","state":"` + `\u001b[2Jheld` + `","supervisorVersion":"\u009b1m","lastExit":{"code":1,"signal":"SIG\u001b[31mKILL","action":"\u202eRestart"},` +
		`"lastRestart":{"code":2,"signal":"\u0007"}}`
	os.WriteFile(filepath.Join(sdir, "app"+evil+".json"), []byte(doc), 0o644)
	os.WriteFile(filepath.Join(sdir, "broken"+evil+".json"), []byte("garbage"), 0o644)
	for _, args := range [][]string{{"--state-dir", dir}, {"--json", "--state-dir", dir}} {
		var out, errb bytes.Buffer
		statusCmd(args, &out, &errb)
		for name, text := range map[string]string{"stdout": out.String(), "stderr": errb.String()} {
			for _, r := range text {
				if r != '\n' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' || r == '\ufffd') {
					t.Errorf("%v: %s holds %U: %q", args, name, r, text)
					break
				}
			}
		}
		want := `\x1b]0;owned\x07`
		if args[0] == "--json" {
			want = `\u001b]0;owned\u0007\u001b[2J\u009b31m\u202e\u007f\ufffd`
		}
		if !strings.Contains(out.String(), want) || !strings.Contains(errb.String(), `broken\x1b`) {
			t.Errorf("%v: escapes not shown: %q %q", args, out.String(), errb.String())
		}
	}
}
