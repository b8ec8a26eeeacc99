package supervise

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// attemptVars are the variables that tell a run which attempt it is, as
// torchrun's TORCHELASTIC_RESTART_COUNT tells its workers: the workload
// cannot read the kubelet's restartCount, and an in-place restart does not
// move it anyway. Each start sets them anew; a value the container's own
// environment gave them is replaced.
var attemptVars = []string{contract.EnvRestartCount, contract.EnvLastExitCode, contract.EnvLastExitSignal, contract.EnvPodRestartGeneration}

// attemptEnv returns the environment of the next run: Options.Env with
//   - RESTART_SUPERVISOR_RESTART_COUNT: the in-place restarts before this
//     run (0 for the first), what `restart-supervisor status` shows;
//   - RESTART_SUPERVISOR_LAST_EXIT_CODE and, when a signal killed it,
//     RESTART_SUPERVISOR_LAST_EXIT_SIGNAL: the previous run's exit (code or
//     128+N, and the signal's name); absent before the first exit;
//   - RESTART_SUPERVISOR_POD_RESTART_GENERATION: with Options.PodGeneration,
//     the pod restart generation the run belongs to (0 before any).
func (s *supervisor) attemptEnv() []string {
	if s.baseEnv == nil {
		s.baseEnv = make([]string, 0, len(s.o.Env)+len(attemptVars))
		for _, kv := range s.o.Env {
			if !isAttemptVar(kv) {
				s.baseEnv = append(s.baseEnv, kv)
			}
		}
	}
	env := append(s.baseEnv[:len(s.baseEnv):len(s.baseEnv)], contract.EnvRestartCount+"="+strconv.Itoa(s.hist.restarts))
	if s.hist.last != nil {
		env = append(env, contract.EnvLastExitCode+"="+strconv.Itoa(s.hist.last.Code))
		if s.hist.last.Signal != 0 {
			env = append(env, contract.EnvLastExitSignal+"="+unix.SignalName(s.hist.last.Signal))
		}
	}
	if s.o.PodGeneration != nil {
		env = append(env, contract.EnvPodRestartGeneration+"="+strconv.FormatUint(s.o.PodGeneration(), 10))
	}
	return env
}

func isAttemptVar(kv string) bool {
	name, _, _ := strings.Cut(kv, "=")
	for _, v := range attemptVars {
		if name == v {
			return true
		}
	}
	return false
}
