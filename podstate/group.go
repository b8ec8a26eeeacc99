package podstate

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// A member's side of group restarts: its request and the wait for the
// node agent's answer. The protocol and the agent's side are statevol's
// (group.go there).

// groupAnswerPoll is how often a waiting member looks for the node agent's
// answer to its request.
const groupAnswerPoll = 100 * time.Millisecond

// GroupRequester returns the supervise.GroupRequester, nil when this
// container cannot take part in pod restarts.
func (p *Pod) GroupRequester() supervise.GroupRequester {
	if p == nil || p.member == nil {
		return nil
	}
	return p
}

// RequestGroup asks the node agent for a restart of the pod's group
// because this container's workload exited with exitCode under a
// RestartGroup rule. refused delivers the agent's refusal, if it makes one;
// the restart itself arrives as a pod restart (Pending). cancel stops
// watching for the answer.
func (p *Pod) RequestGroup(exitCode int32) (refused <-chan string, cancel func(), err error) {
	if p == nil || p.member == nil {
		return nil, nil, errors.New("no pod state directory")
	}
	m := p.member
	// The ID only tells this request's answer from an earlier one's (the
	// answer file is the node agent's, refused if another UID owns it), so
	// the runtime's generator, seeded from the kernel, serves: crypto/rand
	// linked Go's FIPS module into the PID-1 binary, 159,744 B of binary
	// and about 110 kB of idle resident set.
	req := statevol.GroupRequest{ID: fmt.Sprintf("%016x", rand.Uint64()), Container: m.name, ExitCode: exitCode,
		Observed: statevol.LastGroup(m.dir), Time: time.Now().UTC()}
	if err := statevol.RequestGroup(m.dir, req); err != nil {
		return nil, nil, err
	}
	c, done := make(chan string, 1), make(chan struct{})
	var once sync.Once
	go func() {
		tick := time.NewTicker(groupAnswerPoll)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			a, err := statevol.AnswerFor(m.dir, m.name)
			if err == nil && a.ID == req.ID && a.Refused != "" {
				c <- a.Refused
				return
			}
		}
	}()
	return c, func() { once.Do(func() { close(done) }) }, nil
}

// released reports whether the agent released pod generation n.
func (m *Member) released(n uint64) bool {
	return statevol.GroupReleased(m.dir, n)
}

// groupRound reports whether pod generation n is a group restart the
// agent delivered.
func (m *Member) groupRound(n uint64) bool {
	_, err := statevol.AgentGeneration(m.dir, n)
	return err == nil
}

// verifyGroup is Verify for a generation that claims a group cause: its
// file must be the agent's delivery of that generation.
func (m *Member) verifyGroup(g statevol.Generation) error {
	if _, err := statevol.AgentGeneration(m.dir, g.N); err != nil {
		return fmt.Errorf("generation %d claims a group restart: %w", g.N, err)
	}
	return nil
}
