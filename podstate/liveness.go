package podstate

import (
	"errors"
	"os"

	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// memberState is one other member as a waiter sees it: its status
// document (err when there is none or it cannot be read), whether its
// supervisor lives, and whether it marked its end (statevol.MarkEnded).
type memberState struct {
	doc   statevol.Status
	err   error
	live  statevol.Aliveness
	ended bool
}

// readMember reads the status document of container and probes its
// liveness lock.
func readMember(dir, container string) memberState {
	owner := statevol.StatusOwner(dir, container)
	doc, err := statevol.ReadStatus(dir, container)
	return memberState{doc: doc, err: err, live: statevol.ProbeLiveness(dir, container, owner), ended: statevol.EndedMarked(dir, container, owner)}
}

// missingDoc reports whether the member has no status document.
func (s memberState) missingDoc() bool { return errors.Is(s.err, os.ErrNotExist) }
