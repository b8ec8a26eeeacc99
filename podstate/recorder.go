package podstate

import (
	"encoding/json"
	"errors"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// Recorder keeps a container's status document current without putting
// file I/O on the restart path: Update changes the status in memory and a
// background writer persists the latest version. Writes that fall behind
// are coalesced, so a workload restarting a thousand times a second costs
// a few writes, not a thousand fsyncs.
//
// A document that cannot be written (a full or read-only volume, a status/
// that another container replaced by a file, a name another UID holds in
// the sticky directory) is written again, first after retryInitial, then
// at doubling intervals up to retryMax, until a write succeeds: a volume
// that was full for a moment gets the latest status as soon as it has room
// again, without waiting for the next change. The first failure of a run
// is logged, the following ones are counted, and the count is logged with
// the next write that succeeds. Close tries the final write for up to
// finalWriteWait when the volume is full or read-only.
type Recorder struct {
	dir string
	log supervise.Logger

	// writeMu makes one flush run at a time, the writer goroutine's or
	// Sync's, each writing the latest status it finds.
	writeMu sync.Mutex
	mu      sync.Mutex
	cur     statevol.Status
	pending bool
	lastErr error
	// failing counts the failed writes since the last one that succeeded,
	// failed all failed writes.
	failing, failed int
	closed          bool

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// NewRecorder starts a recorder for initial.Container and writes initial.
// Write errors are logged to log (nil: not logged) as Recorder describes;
// the supervisor carries on without its document.
func NewRecorder(dir string, initial statevol.Status, log supervise.Logger) (*Recorder, error) {
	if err := statevol.CheckContainerName(initial.Container); err != nil {
		return nil, err
	}
	if log == nil {
		log = supervise.Discard
	}
	r := &Recorder{dir: dir, log: log, cur: initial, pending: true,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	r.wg.Add(1)
	go r.run()
	r.kick()
	return r, nil
}

// Update applies fn to the status and schedules a write. UpdatedAt is set
// by the recorder.
func (r *Recorder) Update(fn func(*statevol.Status)) {
	r.mu.Lock()
	fn(&r.cur)
	r.cur.UpdatedAt = time.Now()
	r.pending = true
	r.mu.Unlock()
	r.kick()
}

// Sync applies fn to the status and writes it before it returns, for a
// change others must be able to read at once (an announcement).
func (r *Recorder) Sync(fn func(*statevol.Status)) error {
	r.mu.Lock()
	fn(&r.cur)
	r.cur.UpdatedAt = time.Now()
	r.pending = true
	r.mu.Unlock()
	err := r.flush()
	if err != nil {
		// The writer retries it from here.
		r.kick()
	}
	return err
}

// Status returns a copy of the current status.
func (r *Recorder) Status() statevol.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.copyLocked()
}

// FailedWrites returns how many writes of the document have failed so far.
func (r *Recorder) FailedWrites() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// Close writes the latest status, stops the writer and returns the error of
// the last write, nil when the file holds the latest status. It logs
// nothing: the caller reports FailedWrites with its final words.
func (r *Recorder) Close() error {
	r.once.Do(func() { close(r.done) })
	r.wg.Wait()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	deadline := time.Now().Add(finalWriteWait)
	for delay := retryInitial; ; delay *= 2 {
		err := r.flush()
		if err == nil || !recoverable(err) || !time.Now().Add(delay).Before(deadline) {
			break
		}
		time.Sleep(delay)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

const (
	// retryInitial and retryMax space the writes of a document that
	// could not be written: 100 ms, 200 ms, ... 2 s, 2 s, ...
	retryInitial = 100 * time.Millisecond
	retryMax     = 2 * time.Second
	// finalWriteWait bounds how long Close retries the final document on
	// a full or read-only volume: the container's exit waits for it,
	// and the liveness lock, released by the exit, already tells the
	// pod's other members that this one ended.
	finalWriteWait = time.Second
)

// recoverable reports whether a failed write may succeed later without
// anyone repairing the directory: the volume was full, over its quota or
// read-only.
func recoverable(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EROFS) || errors.Is(err, unix.EDQUOT)
}

func (r *Recorder) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Recorder) run() {
	defer r.wg.Done()
	retry := time.NewTimer(0)
	<-retry.C
	delay := time.Duration(0)
	for {
		select {
		case <-r.done:
			retry.Stop()
			return
		case <-r.wake:
		case <-retry.C:
		}
		if r.flush() == nil {
			delay = 0
			continue
		}
		// The status stays pending (flush put it back); write it again
		// later, since nothing else may change it for a long time.
		if delay = min(max(2*delay, retryInitial), retryMax); !retry.Stop() {
			select {
			case <-retry.C:
			default:
			}
		}
		retry.Reset(delay)
	}
}

// flush writes the status if it changed since the last write. Only one
// flush runs at a time (the writer goroutine, Sync, or Close after the
// writer stopped).
func (r *Recorder) flush() error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.Lock()
	if !r.pending {
		r.mu.Unlock()
		return nil
	}
	s := r.copyLocked()
	r.pending = false
	r.mu.Unlock()
	err := statevol.WriteStatus(r.dir, s)
	r.mu.Lock()
	r.lastErr = err
	failing := r.failing
	if err != nil {
		r.failing++
		r.failed++
		// Still to be written: by the retry, or by the next change.
		r.pending = true
	} else {
		r.failing = 0
	}
	closing := r.closed
	r.mu.Unlock()
	switch {
	case closing:
		// Close's caller reports the outcome.
	case err != nil && failing == 0:
		r.log.Warn("cannot write the status document; further failures are counted, not logged", "err", err)
	case err == nil && failing > 0:
		r.log.Info("status document written again", "failedWrites", failing)
	}
	return err
}

// copyLocked deep-copies the status so the writer never shares the
// pointers that Update may change.
func (r *Recorder) copyLocked() statevol.Status {
	var s statevol.Status
	data, _ := json.Marshal(r.cur)
	_ = json.Unmarshal(data, &s)
	return s
}
