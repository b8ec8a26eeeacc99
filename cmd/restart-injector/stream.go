package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/restart-supervisor/restart-supervisor/manifests"
)

// streamRun is one run of inject or uninject over its -f inputs: each file
// is read, processed and written document by document, so memory follows
// the largest document, not the input. The output goes through a temporary
// file (the -o file's, or an unlinked one for stdout; memory when no
// temporary file can be made) unless it may be written as it comes (stdout
// with --continue-on-error): without --continue-on-error nothing is
// written when a document fails.
type streamRun struct {
	name            string // the subcommand, in messages
	files           []string
	stdin           io.Reader
	stdout, stderr  io.Writer
	outFile         string
	diff, keepGoing bool
	diffLabel       string // (injected) or (uninjected) in --diff headers
	failed          bool
}

type processFunc func(r io.Reader, w io.Writer, emit func(*manifests.Document, []manifests.ObjectReport)) error

func (s *streamRun) fail(format string, args ...any) int {
	fmt.Fprintf(s.stderr, "restart-injector "+s.name+": "+format+"\n", args...)
	return exitFailure
}

func (s *streamRun) run(process processFunc, report func(name string, r manifests.ObjectReport)) int {
	inputs, err := collectInputs(s.files)
	if err != nil {
		return s.fail("%v", err)
	}
	var spool *os.File
	var mem *bytes.Buffer
	var out *bufio.Writer
	switch {
	case s.outFile != "":
		if spool, err = os.CreateTemp(filepath.Dir(s.outFile), "."+filepath.Base(s.outFile)+".*"); err != nil {
			return s.fail("-o: %v", err)
		}
		defer os.Remove(spool.Name()) // gone already after a rename
		defer spool.Close()
		out = bufio.NewWriterSize(spool, 64<<10)
	case s.keepGoing:
		out = bufio.NewWriterSize(s.stdout, 64<<10)
	default:
		if spool, err = os.CreateTemp("", "restart-injector-*"); err != nil {
			// No writable temporary directory (a read-only container,
			// say): the output is held in memory instead.
			mem = &bytes.Buffer{}
			out = bufio.NewWriterSize(mem, 64<<10)
			break
		}
		os.Remove(spool.Name()) // unlinked: nothing is left behind
		defer spool.Close()
		out = bufio.NewWriterSize(spool, 64<<10)
	}
	w := &trackingWriter{w: out}
	// What each object became is said once the output is written: a run
	// that fails writes nothing, and then no object was injected, however
	// well it went (with --continue-on-error the output is written as it
	// comes, and so are the reports).
	type held struct {
		name string
		r    manifests.ObjectReport
	}
	var reports []held
	hold := report
	if !s.keepGoing {
		hold = func(name string, r manifests.ObjectReport) { reports = append(reports, held{name, r}) }
	}
	for n, in := range inputs {
		if code := s.one(n, in, w, process, hold); code != exitOK {
			return code
		}
	}
	if s.failed {
		// Half a stream piped into kubectl apply would be worse than
		// none: nothing is written.
		return exitFailure
	}
	written := false
	defer func() {
		if !written {
			return
		}
		for _, h := range reports {
			report(h.name, h.r)
		}
	}()
	if err := out.Flush(); err != nil {
		return s.fail("writing output: %v", err)
	}
	switch {
	case s.outFile != "":
		err = spool.Chmod(0o644)
		if cerr := spool.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(spool.Name(), s.outFile)
		}
		if err != nil {
			return s.fail("-o: %v", err)
		}
	case mem != nil:
		if _, err := mem.WriteTo(s.stdout); err != nil {
			return s.fail("writing output: %v", err)
		}
	case spool != nil:
		if _, err := spool.Seek(0, io.SeekStart); err != nil {
			return s.fail("%v", err)
		}
		if _, err := io.Copy(s.stdout, spool); err != nil {
			return s.fail("writing output: %v", err)
		}
	}
	written = true
	return exitOK
}

// one processes input n into w.
func (s *streamRun) one(n int, in input, w *trackingWriter, process processFunc, report func(string, manifests.ObjectReport)) int {
	r, closeIn, err := in.open(s.stdin)
	if err != nil {
		return s.fail("%v", err)
	}
	defer closeIn()
	emit := func(d *manifests.Document, reports []manifests.ObjectReport) {
		if d.Err != nil {
			// Every failed document is named, one line each, not only
			// the first.
			prefix := "restart-injector " + s.name + ": "
			if s.keepGoing {
				prefix = "warning: left unchanged: "
			} else {
				s.failed = true
			}
			fmt.Fprintf(s.stderr, "%s%s: %v\n", prefix, in.name, d.Err)
		}
		for _, rep := range reports {
			report(in.name, rep)
		}
	}
	if s.diff {
		// A diff needs both sides of the file whole.
		src, err := io.ReadAll(r)
		if err != nil {
			return s.fail("%s: %v", in.name, err)
		}
		var doc bytes.Buffer
		if err := process(bytes.NewReader(src), &doc, emit); err != nil {
			return s.fail("%s: %v", in.name, err)
		}
		ud := difflib.UnifiedDiff{A: difflib.SplitLines(string(src)), B: difflib.SplitLines(doc.String()),
			FromFile: in.name, ToFile: in.name + " (" + s.diffLabel + ")", Context: 3}
		if err := difflib.WriteUnifiedDiff(w, ud); err != nil {
			return s.fail("%v", err)
		}
		return exitOK
	}
	if n > 0 {
		// Separate the files' streams; JSON is valid YAML, so "---"
		// works between any two.
		if w.n > 0 && w.last != '\n' {
			w.Write([]byte("\n"))
		}
		w.Write([]byte("---\n"))
	}
	if err := process(r, w, emit); err != nil {
		return s.fail("%s: %v", in.name, err)
	}
	return exitOK
}

// trackingWriter remembers the last byte written, for the separator
// between files.
type trackingWriter struct {
	w    io.Writer
	n    int64
	last byte
}

func (t *trackingWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if n > 0 {
		t.n += int64(n)
		t.last = p[n-1]
	}
	return n, err
}

// input is one -f argument, or one file of a directory.
type input struct {
	name string
	path string // "" for stdin
}

func (in input) open(stdin io.Reader) (io.Reader, func(), error) {
	if in.path == "" {
		return stdin, func() {}, nil
	}
	f, err := os.Open(in.path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

// collectInputs lists the -f arguments in order; directories contribute
// their .yaml, .yml and .json files, recursively, in lexical order.
func collectInputs(files []string) ([]input, error) {
	var out []input
	for _, f := range files {
		if f == "-" {
			out = append(out, input{name: "<stdin>"})
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, input{name: f, path: f})
			continue
		}
		err = filepath.WalkDir(f, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(filepath.Ext(p)) {
			case ".yaml", ".yml", ".json":
			default:
				return nil
			}
			if d.IsDir() {
				return nil
			}
			out = append(out, input{name: p, path: p})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readInputs reads every input whole (explain).
func readInputs(files []string, stdin io.Reader) ([]struct {
	name string
	data []byte
}, error) {
	ins, err := collectInputs(files)
	if err != nil {
		return nil, err
	}
	var out []struct {
		name string
		data []byte
	}
	for _, in := range ins {
		r, closeIn, err := in.open(stdin)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(r)
		closeIn()
		if err != nil {
			if in.path == "" {
				return nil, fmt.Errorf("reading stdin: %v", err)
			}
			return nil, err
		}
		out = append(out, struct {
			name string
			data []byte
		}{in.name, b})
	}
	return out, nil
}
