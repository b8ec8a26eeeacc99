package podstate

import (
	"encoding/json"
	"sync"
	"time"
)

// Recorder keeps a container's status document current without putting
// file I/O on the restart path: Update changes the status in memory and a
// background writer persists the latest version. Writes that fall behind
// are coalesced, so a workload restarting a thousand times a second costs
// a few writes, not a thousand fsyncs.
type Recorder struct {
	dir     string
	onError func(error)

	mu      sync.Mutex
	cur     Status
	pending bool
	lastErr error

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// NewRecorder starts a recorder for initial.Container and writes initial.
// onError, when not nil, receives write errors (from the writer goroutine);
// the supervisor logs them and carries on.
func NewRecorder(dir string, initial Status, onError func(error)) (*Recorder, error) {
	if err := CheckContainerName(initial.Container); err != nil {
		return nil, err
	}
	r := &Recorder{dir: dir, onError: onError, cur: initial, pending: true,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	r.wg.Add(1)
	go r.run()
	r.kick()
	return r, nil
}

// Update applies fn to the status and schedules a write. UpdatedAt is set
// by the recorder.
func (r *Recorder) Update(fn func(*Status)) {
	r.mu.Lock()
	fn(&r.cur)
	r.cur.UpdatedAt = time.Now()
	r.pending = true
	r.mu.Unlock()
	r.kick()
}

// Status returns a copy of the current status.
func (r *Recorder) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.copyLocked()
}

// Close writes the latest status, stops the writer and returns the error of
// the last write, nil when the file holds the latest status.
func (r *Recorder) Close() error {
	r.once.Do(func() { close(r.done) })
	r.wg.Wait()
	r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

func (r *Recorder) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Recorder) run() {
	defer r.wg.Done()
	for {
		select {
		case <-r.done:
			return
		case <-r.wake:
			if err := r.flush(); err != nil && r.onError != nil {
				r.onError(err)
			}
		}
	}
}

// flush writes the status if it changed since the last write. Only one
// flush runs at a time (the writer goroutine, or Close after it stopped).
func (r *Recorder) flush() error {
	r.mu.Lock()
	if !r.pending {
		r.mu.Unlock()
		return nil
	}
	s := r.copyLocked()
	r.pending = false
	r.mu.Unlock()
	err := WriteStatus(r.dir, s)
	r.mu.Lock()
	r.lastErr = err
	r.mu.Unlock()
	return err
}

// copyLocked deep-copies the status so the writer never shares the
// pointers that Update may change.
func (r *Recorder) copyLocked() Status {
	var s Status
	data, _ := json.Marshal(r.cur)
	_ = json.Unmarshal(data, &s)
	return s
}
