package supervise

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAttemptEnvironment: every run learns which attempt it is. Run 1 exits
// 42, run 2 is killed by SIGKILL (137), run 3 records what it was given
// and exits 0, all restarted in place by a rule. A value the container's
// environment gave RESTART_SUPERVISOR_RESTART_COUNT is replaced, and
// without Options.PodGeneration no generation is set.
func TestAttemptEnvironment(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "attempts")
	o := shell(`echo "${RESTART_SUPERVISOR_RESTART_COUNT-unset} ${RESTART_SUPERVISOR_LAST_EXIT_CODE-unset} ${RESTART_SUPERVISOR_LAST_EXIT_SIGNAL-unset} ${RESTART_SUPERVISOR_POD_RESTART_GENERATION-unset}" >> ` + log + `
case $RESTART_SUPERVISOR_RESTART_COUNT in
0) exit 42 ;;
1) kill -KILL $$ ;;
esac
exit 0`)
	o.Env = append(o.Env, "RESTART_SUPERVISOR_RESTART_COUNT=99", "RESTART_SUPERVISOR_LAST_EXIT_SIGNAL=SIGFAKE")
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42,137]}}]}`)
	r := waitResult(t, runAsync(o))
	if r.Status != 0 || r.Restarts != 2 {
		t.Fatalf("result %+v, want status 0 after 2 restarts", r)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := "0 unset unset unset\n1 42 unset unset\n2 137 SIGKILL unset\n"
	if string(b) != want {
		t.Fatalf("the runs saw\n%s\nwant\n%s", b, want)
	}
}

// TestAttemptEnvironmentPodGeneration: with Options.PodGeneration each run
// is told the pod restart generation it belongs to, read at its start.
func TestAttemptEnvironmentPodGeneration(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "attempts")
	gen := uint64(6)
	o := shell(`echo "$RESTART_SUPERVISOR_POD_RESTART_GENERATION" >> ` + log + `
[ "$RESTART_SUPERVISOR_RESTART_COUNT" = 0 ] && exit 42
exit 0`)
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`)
	o.PodGeneration = func() uint64 { gen++; return gen }
	if r := waitResult(t, runAsync(o)); r.Status != 0 {
		t.Fatalf("result %+v", r)
	}
	b, _ := os.ReadFile(log)
	if got := strings.Fields(string(b)); len(got) != 2 || got[0] != "7" || got[1] != "8" {
		t.Fatalf("generations seen %q, want 7 then 8", got)
	}
}
