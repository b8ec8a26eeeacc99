package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// writeOwnStatus writes the status document an earlier supervisor of
// container left, as this UID.
func writeOwnStatus(t *testing.T, state, container string, doc map[string]any) {
	t.Helper()
	os.MkdirAll(filepath.Join(state, "status"), 0o777)
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "status", container+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// resumedWait is the "waiting" of the supervisor's "continuing the
// container's back-off" line.
func resumedWait(t *testing.T, s *sup) time.Duration {
	t.Helper()
	s.waitLog("continuing the container's back-off from its last exit", 15*time.Second)
	m := regexp.MustCompile(`continuing the container's back-off.* waiting=(\S+)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no waiting= in:\n%s", s.stderr.String())
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestFutureDatedStatusDocument: a status document is anyone's of the
// container's UID to write. One dated in the future (2100, or an hour
// ahead) made the next supervisor wait the whole difference before the
// first start, and a stop during that wait exited 0 instead of the exit
// the document handed over. The resumed wait is at most the back-off's
// maximum, and a stop during it exits with the handed-over code.
func TestFutureDatedStatusDocument(t *testing.T) {
	for name, at := range map[string]time.Time{
		"2100":       time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		"an hour on": time.Now().Add(time.Hour),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			os.Mkdir(state, 0o777)
			doc := map[string]any{"container": "trainer", "state": "exited", "backoffRestarts": 20,
				"lastExit": map[string]any{"code": 1, "at": at}, "startedAt": at, "nextStartAt": at, "updatedAt": at}
			env := func(max string) []string {
				return []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=trainer",
					`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"100ms","max":"` + max + `"}}`}
			}

			// A stop during the resumed wait exits 1, the code handed over.
			writeOwnStatus(t, state, "trainer", doc)
			s := start(t, env("60s"), bin, "--", "sh", "-c", "touch "+dir+"/ran")
			if d := resumedWait(t, s); d > time.Minute {
				t.Errorf("resumed wait %s, more than the back-off's maximum of 60s", d)
			}
			s.signal(syscall.SIGTERM)
			if st := s.wait(10 * time.Second); st != 1 {
				t.Errorf("stopped during the resumed back-off: exit %d, want the handed-over 1\n%s", st, s.stderr.String())
			}
			if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
				t.Fatal("the workload ran before the stop; the test needs the stop in the back-off")
			}
			// The next supervisor still has the exit to resume from.
			if d := readStatusDoc(t, state, "trainer"); d["lastExit"] == nil {
				t.Errorf("the final document lost the handed-over exit: %v", d)
			}

			// With a short maximum the workload runs within it.
			writeOwnStatus(t, state, "trainer", doc)
			s = start(t, env("300ms"), bin, "--", "sh", "-c", "touch "+dir+"/ran; exit 7")
			if d := resumedWait(t, s); d > 300*time.Millisecond {
				t.Errorf("resumed wait %s, more than the back-off's maximum of 300ms", d)
			}
			if st := s.wait(15 * time.Second); st != 7 {
				t.Fatalf("exit %d, want the workload's 7\n%s", st, s.stderr.String())
			}
		})
	}
}

// TestRestartsTotalContinuesAcrossHandOver: each supervisor process counts
// its in-place restarts from 0; restartsTotal in the status document goes
// on from the one the earlier supervisor of the container left, as the
// back-off does. Exits 42, 42, 1 (handed over), then 42 and 1 under the
// next supervisor: restarts 1, restartsTotal 3.
func TestRestartsTotalContinuesAcrossHandOver(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	env := []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=trainer",
		`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s","max":"0s"},
		  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`}
	w := counterScript(t, dir, 42, 42, 1, 42, 1)
	for i, want := range []struct{ restarts, total float64 }{{2, 2}, {1, 3}} {
		if st := start(t, env, bin, "--", w).wait(15 * time.Second); st != 1 {
			t.Fatalf("supervisor %d: exit %d, want 1", i+1, st)
		}
		d := readStatusDoc(t, state, "trainer")
		if d["restarts"] != want.restarts || d["restartsTotal"] != want.total {
			t.Errorf("supervisor %d: restarts %v restartsTotal %v, want %v and %v", i+1, d["restarts"], d["restartsTotal"], want.restarts, want.total)
		}
	}
}

// TestResumeAfterAStopStartsAtOnce: a container the kubelet stops and
// starts again (an in-place resize with RestartContainer, an image change)
// is not backed off from the stop: the kubelet measures the back-off from
// the last instance that exited before (kuberuntime_manager.go doBackOff,
// v1.37.2). The first supervisor restarts twice in place (delays 0, 1s),
// then is stopped while run 3 runs; the second starts at once, and its
// first crash waits the curve's next step (2s), not a fresh 0.
func TestResumeAfterAStopStartsAtOnce(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	env := []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=trainer",
		`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"1s","max":"10s"},
		  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`}
	w := filepath.Join(dir, "w.sh")
	os.WriteFile(w, []byte(`#!/bin/sh
n=$(cat `+dir+`/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > `+dir+`/count
case $n in 1|2|4) exit 42 ;; 3) touch `+dir+`/running ;; esac
exec sleep 60
`), 0o755)
	first := start(t, env, bin, "--", w)
	first.waitLog("restarts=2", 15*time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "running")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.signal(syscall.SIGTERM)
	if st := first.wait(10 * time.Second); st != 143 {
		t.Fatalf("first supervisor: exit %d, want 143 (stopped)\n%s", st, first.stderr.String())
	}
	if d := readStatusDoc(t, state, "trainer"); d["lastExit"].(map[string]any)["stopped"] != true {
		t.Fatalf("the final document does not say the run was stopped: %v", d["lastExit"])
	}
	second := start(t, env, bin, "--", w)
	second.waitLog("restarts=1 delay=", 15*time.Second)
	out := second.stderr.String()
	if !regexp.MustCompile(`stopped, not crashed.*backoffRestarts=2`).MatchString(out) || regexp.MustCompile(`continuing the container's back-off`).MatchString(out) {
		t.Errorf("the second supervisor waited out a back-off from the stop:\n%s", out)
	}
	if !regexp.MustCompile(`exitCode=42 .*restarts=1 delay=2s`).MatchString(out) {
		t.Errorf("the first crash after the stop does not continue the curve (want delay=2s):\n%s", out)
	}
	second.signal(syscall.SIGTERM)
	second.wait(10 * time.Second)
}
