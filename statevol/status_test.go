package statevol

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
)

func TestWriteStatusRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", "../x", "a/b", ".hidden", strings.Repeat("a", 254)} {
		if err := WriteStatus(t.TempDir(), Status{Container: name}); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
}

// Readers racing a writer that replaces the document continuously must
// always see a complete document.
func TestWriteStatusIsAtomicForConcurrentReaders(t *testing.T) {
	dir := t.TempDir()
	pad := strings.Repeat("x", 64<<10) // large enough that a torn write would show
	if err := WriteStatus(dir, Status{Container: "c", SupervisorVersion: pad}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				data, err := os.ReadFile(StatusPath(dir, "c"))
				if err != nil {
					errs <- err.Error()
					return
				}
				var s Status
				if err := json.Unmarshal(data, &s); err != nil || s.SupervisorVersion != pad {
					errs <- "torn read"
					return
				}
			}
		}()
	}
	for i := 0; i < 60; i++ {
		if err := WriteStatus(dir, Status{Container: "c", Restarts: i, SupervisorVersion: pad}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
