package supervise

import (
	"time"
)

// The group restart (the RestartGroup action, docs/gang.md): an exit under
// a RestartGroup rule asks the node agent, through the pod's state
// directory, to restart every container of every pod of the pod's group;
// the supervisor, which has no network code, then waits for one of three
// things: the restart itself, which reaches it as a pod restart
// (RestartFeed) and is carried out as a round of RestartAllContainers is;
// the agent's refusal (the group's budget is spent); or GroupAnswerWait
// without either (no node agent runs). The last two hand the exit over to
// the kubelet, whose pod policy decides, as a spent restart budget does.

// GroupAnswerWait bounds the wait for the node agent's answer to a group
// restart request. The agent looks at requests every few hundred
// milliseconds and answers within one API round trip; a wait this long
// means no agent runs on the node (or it cannot reach the API server).
var GroupAnswerWait = 30 * time.Second

// GroupRequester is what an exit under a RestartGroup rule uses (restart).
type GroupRequester interface {
	// RequestGroup asks for a restart of the pod's group because this
	// workload exited with exitCode. refused delivers the agent's refusal;
	// the restart arrives through RestartFeed. cancel stops watching.
	RequestGroup(exitCode int32) (refused <-chan string, cancel func(), err error)
}

// Reasons for handing over an exit under a RestartGroup rule.
const (
	ReasonGroupRestartRefused = "GroupRestartRefused"
	ReasonNoNodeAgent         = "NoNodeAgent"
)

// groupWait is a request for a group restart the exited workload waits on
// (waitGroup).
type groupWait struct {
	refused <-chan string
	cancel  func()
	timer   *time.Timer
	v       verdict
	exit    *Exit
	attrs   []any
}

// groupArrived counts the in-place restart the group restart makes of this
// workload, as restart counts any other.
func (s *supervisor) groupArrived(g *groupWait) {
	s.recordRestart(g.exit, true, true)
}

func (g *groupWait) leave() {
	g.timer.Stop()
	g.cancel()
}

func (w *waiting) groupRefusedC() <-chan string {
	if w.kind != waitGroup {
		return nil
	}
	return w.group.refused
}

func (w *waiting) groupTimeoutC() <-chan time.Time {
	if w.kind != waitGroup {
		return nil
	}
	return w.group.timer.C
}

// requestGroup asks for the group restart and waits for it; without a
// pod state directory, or when the request cannot be written, the exit is
// handed over at once.
func (s *supervisor) requestGroup(v verdict, exit *Exit, attrs []any) bool {
	if s.o.Group == nil || s.o.Pod == nil {
		s.handOverInstead(v, &HandOver{ReasonNoNodeAgent, "RestartGroup needs the pod state directory, which this container has not"}, exit, attrs)
		return false
	}
	refused, cancel, err := s.o.Group.RequestGroup(int32(exit.Code))
	if err != nil {
		s.handOverInstead(v, &HandOver{ReasonNoNodeAgent, "cannot request the group restart: " + clipText(err.Error(), 256)}, exit, attrs)
		return false
	}
	s.log.Info("workload exited; asking the node agent to restart the pod's group in place", append(attrs[:len(attrs):len(attrs)], "wait", GroupAnswerWait)...)
	s.await(waiting{kind: waitGroup, group: &groupWait{refused: refused, cancel: cancel, timer: time.NewTimer(GroupAnswerWait),
		v: v, exit: exit, attrs: attrs}})
	return true
}

// onGroupAnswer ends the wait for a group restart that did not come: the
// agent refused it (why non-empty) or did not answer in time.
func (s *supervisor) onGroupAnswer(why string) {
	g := s.wait.group
	s.wait.leave()
	if why != "" {
		s.handOverInstead(g.v, &HandOver{ReasonGroupRestartRefused, "the node agent refused the group restart: " + clipText(why, 256)}, g.exit, g.attrs)
		return
	}
	s.handOverInstead(g.v, &HandOver{ReasonNoNodeAgent, "no node agent answered the group restart request within " + GroupAnswerWait.String()}, g.exit, g.attrs)
}
