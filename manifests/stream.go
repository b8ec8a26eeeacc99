package manifests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/internal/oneline"
)

// MaxDocumentBytes bounds one document of a stream: the reader holds one
// document at a time (a few, when they are processed in parallel), never
// the stream. Kubernetes itself refuses objects far smaller (etcd's
// request limit is 1.5 MiB).
const MaxDocumentBytes = 64 << 20

// maxDocumentBytes is MaxDocumentBytes, lowered by tests.
var maxDocumentBytes = MaxDocumentBytes

// Reader splits a stream into documents as it reads it: YAML documents at
// "---" lines, or JSON values when the stream starts with '{'. A stream
// that starts with '{' but whose value is not JSON (flow-style YAML) is
// read as YAML from there on.
type Reader struct {
	r     *bufio.Reader
	line  int // line at which the next document starts
	json  bool
	begun bool
	done  bool
	// sep is the YAML separator line that ends the document being read.
	sep []byte
	n   int // documents returned
}

// NewReader reads documents from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), line: 1}
}

// unread puts b back in front of what is left of the stream.
func (rd *Reader) unread(b []byte) {
	if len(b) > 0 {
		rd.r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(b), rd.r), 64<<10)
	}
}

// Next returns the next document, with Object not yet decoded (see
// Decode), or io.EOF after the last. Like ReadManifests, a stream always
// has at least one document, possibly empty. Other errors (reading, or a
// document larger than MaxDocumentBytes) end the stream.
func (rd *Reader) Next() (*Document, error) {
	if rd.done {
		return nil, io.EOF
	}
	if !rd.begun {
		rd.begun = true
		ws, err := rd.space()
		if err != nil {
			return nil, err
		}
		if b, err := rd.r.Peek(1); err == nil && b[0] == '{' {
			rd.json = true
			return rd.nextJSON(ws)
		}
		rd.unread(ws)
	}
	if rd.json {
		ws, err := rd.space()
		if err != nil {
			return nil, err
		}
		return rd.nextJSON(ws)
	}
	return rd.nextYAML()
}

// space reads the blanks before a JSON value.
func (rd *Reader) space() ([]byte, error) {
	var ws []byte
	for {
		c, err := rd.r.ReadByte()
		if err == io.EOF {
			return ws, nil
		}
		if err != nil {
			return nil, err
		}
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return ws, rd.r.UnreadByte()
		}
		ws = append(ws, c)
		if len(ws) > maxDocumentBytes {
			return nil, fmt.Errorf("line %d: more than %d bytes of blanks", rd.line, maxDocumentBytes)
		}
	}
}

func (rd *Reader) nextJSON(ws []byte) (*Document, error) {
	start := rd.line
	lines := bytes.Count(ws, []byte("\n"))
	raw, err := rd.jsonValue()
	if err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		// The end: blanks after the last value, or an empty stream.
		rd.done = true
		if len(ws) == 0 && rd.n > 0 {
			return nil, io.EOF
		}
		rd.n++
		return &Document{Sep: ws, Line: start, format: FormatJSON}, nil
	}
	var obj any
	if utiljson.Unmarshal(raw, &obj) != nil {
		// Not JSON: YAML from here on (flow-style YAML starts with
		// '{' too), from the blanks before this value.
		rd.json = false
		rd.unread(append(ws, raw...))
		return rd.nextYAML()
	}
	rd.line = start + lines + bytes.Count(raw, []byte("\n"))
	rd.n++
	d := &Document{Sep: ws, Raw: raw, Line: start + lines, format: FormatJSON}
	d.Object, _ = obj.(map[string]any)
	d.ruleFree = ruleFreeValue(obj, false, 0)
	d.decoded = true
	return d, nil
}

// jsonValue reads one JSON value's text: an object or array up to its
// closing bracket, a string, or a scalar up to the next blank or
// delimiter. Whether it is valid JSON is for the decoder to say.
func (rd *Reader) jsonValue() ([]byte, error) {
	var out []byte
	depth, inString, escaped := 0, false, false
	for {
		c, err := rd.r.ReadByte()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(out) >= maxDocumentBytes {
			return nil, fmt.Errorf("line %d: document larger than %d bytes", rd.line, maxDocumentBytes)
		}
		if depth == 0 && !inString && len(out) > 0 && out[0] != '{' && out[0] != '[' && out[0] != '"' {
			// A scalar ends at a blank or a delimiter.
			switch c {
			case ' ', '\t', '\r', '\n', '{', '[', '"', ',', ']', '}':
				return out, rd.r.UnreadByte()
			}
		}
		out = append(out, c)
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if depth == 0 {
					return out, nil
				}
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth <= 0 {
				return out, nil
			}
		}
	}
}

// nextYAML reads up to the next separator line.
func (rd *Reader) nextYAML() (*Document, error) {
	d := &Document{Sep: rd.sep, Line: rd.line}
	var raw []byte
	lines := 0
	for {
		line, err := rd.readLine()
		if err != nil && err != io.EOF {
			return nil, err
		}
		if len(line) > 0 && isSeparator(line) {
			rd.sep = line
			d.Raw = raw
			rd.line += lines + 1
			rd.n++
			return d, nil
		}
		raw = append(raw, line...)
		if len(line) > 0 && line[len(line)-1] == '\n' {
			lines++
		}
		if len(raw) > maxDocumentBytes {
			return nil, fmt.Errorf("document at line %d: larger than %d bytes", d.Line, maxDocumentBytes)
		}
		if err == io.EOF {
			rd.done = true
			d.Raw = raw
			rd.n++
			return d, nil
		}
	}
}

// readLine reads one line, with its newline.
func (rd *Reader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := rd.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxDocumentBytes {
			return nil, fmt.Errorf("line %d: longer than %d bytes", rd.line, maxDocumentBytes)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, err
	}
}

// Decode fills in d.Object (and the parsed tree of a YAML document); an
// error names the document's line.
func (d *Document) Decode() error {
	if d.decoded {
		return nil
	}
	d.decoded = true
	if d.format == FormatJSON {
		if len(d.Raw) == 0 {
			return nil
		}
		var obj any
		if err := utiljson.Unmarshal(d.Raw, &obj); err != nil {
			return fmt.Errorf("document at line %d: %s", d.Line, oneline.Error(err))
		}
		d.Object, _ = obj.(map[string]any)
		d.ruleFree = ruleFreeValue(obj, false, 0)
		return nil
	}
	return decodeYAMLDoc(d)
}

// Process reads documents from r, calls f on each one that could be
// decoded, and writes them to w in order: a document f changed (Ops or
// its output set) as changed, every other one byte for byte. A document
// that cannot be decoded, or for which f fails, gets its Err set and is
// written back unchanged. emit is called for every document, in order,
// before it is written, with what f reported.
//
// Documents are processed on GOMAXPROCS goroutines and at most a few per
// goroutine are held at once, so memory follows the largest documents,
// not the stream. The error returned is a reading, writing or encoding
// error, which ends the stream.
func Process(ctx context.Context, r io.Reader, w io.Writer, f func(*Document) ([]ObjectReport, error), emit func(*Document, []ObjectReport)) error {
	workers := runtime.GOMAXPROCS(0)
	window := 4 * workers
	type job struct {
		seq int
		d   *Document
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tokens := make(chan struct{}, window)
	jobs := make(chan job, window)
	results := make(chan processed, window)
	var readErr error
	go func() {
		defer close(jobs)
		rd := NewReader(r)
		for seq := 0; ; seq++ {
			select {
			case tokens <- struct{}{}:
			case <-ctx.Done():
				return
			}
			d, err := rd.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				readErr = err
				return
			}
			jobs <- job{seq, d}
		}
	}()
	var wg sync.WaitGroup
	for k := 0; k < workers; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				results <- processDoc(j.seq, j.d, f)
			}
		}()
	}
	go func() {
		wg.Wait()
		close(results)
	}()
	pending := map[int]processed{}
	next := 0
	var err error
	for res := range results {
		pending[res.seq] = res
		for {
			p, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			<-tokens
			if err != nil {
				continue // drain
			}
			if p.err != nil {
				err = p.err
				cancel()
				continue
			}
			emit(p.d, p.reports)
			if err = p.write(w); err != nil {
				cancel()
			}
		}
	}
	if err == nil && readErr != nil {
		err = readErr
	}
	return err
}

// processed is one document after f: what it reported, its new text when
// it changed, and an encoding error, which ends the stream.
type processed struct {
	seq     int
	d       *Document
	reports []ObjectReport
	out     []byte
	err     error
}

// processDoc decodes d, calls f on it and encodes it again when f changed
// it. A document that cannot be decoded, or for which f fails, gets its Err
// set and is written back unchanged; only what is written is kept of it.
func processDoc(seq int, d *Document, f func(*Document) ([]ObjectReport, error)) processed {
	res := processed{seq: seq, d: d}
	if err := d.Decode(); err != nil {
		d.Err = err
	} else if res.reports, err = f(d); err != nil {
		d.Err, d.Ops, d.roots, d.out = err, nil, nil, nil
		res.reports = nil
	}
	if d.Err == nil && d.Changed() {
		if d.out != nil {
			res.out = d.out
		} else if out, err := encodeDoc(*d); err != nil {
			res.err = fmt.Errorf("line %d: %v", d.Line, err)
		} else {
			res.out = out
		}
	}
	d.Object, d.node, d.Ops = nil, nil, nil
	return res
}

// write writes the document's separator and its text: the new one when
// it changed, else the one read.
func (p processed) write(w io.Writer) error {
	if _, err := w.Write(p.d.Sep); err != nil {
		return err
	}
	body := p.d.Raw
	if p.out != nil {
		body = p.out
	}
	_, err := w.Write(body)
	return err
}

// encodeDoc writes a changed document in its own format.
func encodeDoc(d Document) ([]byte, error) {
	return (&Manifests{Format: d.format}).encode(d)
}

// InjectStream is Inject on a stream, written to w as it goes;
// see Process.
func InjectStream(ctx context.Context, i *injector.Injector, r io.Reader, w io.Writer, emit func(*Document, []ObjectReport)) error {
	return Process(ctx, r, w, func(d *Document) ([]ObjectReport, error) { return injectDoc(ctx, i, d) }, emit)
}

// UninjectStream is UninjectManifests on a stream, written to w as it
// goes; see Process.
func UninjectStream(ctx context.Context, r io.Reader, w io.Writer, emit func(*Document, []ObjectReport)) error {
	return Process(ctx, r, w, uninjectDoc, emit)
}
