package injector

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	textyaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	kubeyaml "sigs.k8s.io/yaml"
)

// Format of a manifest stream.
type Format int

const (
	FormatYAML Format = iota
	FormatJSON
)

// Manifests is a parsed stream of YAML documents or JSON values. Writing it
// back reproduces the input byte for byte except for the documents that
// were replaced.
type Manifests struct {
	Format Format
	Docs   []Document
}

// Document is one YAML document or JSON value.
type Document struct {
	// Sep is the text before the document: a YAML "---" line, or the
	// whitespace between JSON values.
	Sep []byte
	Raw []byte
	// Object is the decoded object; nil for empty documents and values
	// that are not objects.
	Object map[string]any
	// Line is where Raw starts (1-based), for messages.
	Line int
	// Ops, when not empty, change the document: it is written as Raw
	// with Ops applied, so that key order, comments and formatting of
	// the parts they do not touch survive.
	Ops []PatchOp

	node *textyaml.Node // the parsed YAML document, reused when writing
}

// Changed reports whether the document will be written differently.
func (d *Document) Changed() bool { return len(d.Ops) > 0 }

// Result returns the changed object (Object with Ops applied).
func (d *Document) Result() (map[string]any, error) { return ApplyPatch(d.Object, d.Ops) }

// ReadManifests parses a stream. JSON is recognised by a leading '{'.
func ReadManifests(data []byte) (*Manifests, error) {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		if m, err := readJSON(data); err == nil {
			return m, nil
		}
		// Flow-style YAML also starts with '{'; let the YAML reader decide.
	}
	return readYAML(data)
}

func readJSON(data []byte) (*Manifests, error) {
	m := &Manifests{Format: FormatJSON}
	dec := json.NewDecoder(bytes.NewReader(data))
	var prev int64
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		end := dec.InputOffset()
		start := end - int64(len(raw))
		doc := Document{Sep: data[prev:start], Raw: data[start:end], Line: 1 + bytes.Count(data[:start], []byte("\n"))}
		var obj any
		if err := utiljson.Unmarshal(raw, &obj); err != nil {
			return nil, err
		}
		doc.Object, _ = obj.(map[string]any)
		m.Docs = append(m.Docs, doc)
		prev = end
	}
	if int(prev) < len(data) || len(m.Docs) == 0 {
		m.Docs = append(m.Docs, Document{Sep: data[prev:], Line: 1 + bytes.Count(data[:prev], []byte("\n"))})
	}
	return m, nil
}

func readYAML(data []byte) (*Manifests, error) {
	m := &Manifests{Format: FormatYAML}
	line, docLine := 1, 1
	var sep []byte
	start := 0
	flush := func(end int) error {
		raw := data[start:end]
		doc := Document{Sep: sep, Raw: raw, Line: docLine}
		var node textyaml.Node
		if err := textyaml.Unmarshal(raw, &node); err != nil {
			return fmt.Errorf("document at line %d: %s", docLine, oneLine(err))
		}
		if node.Kind == textyaml.DocumentNode && len(node.Content) == 1 && node.Content[0].Kind == textyaml.MappingNode {
			var obj any
			if err := node.Decode(&obj); err != nil {
				return fmt.Errorf("document at line %d: %s", docLine, oneLine(err))
			}
			o, err := jsonValue(obj)
			if err != nil {
				return fmt.Errorf("document at line %d: %v", docLine, err)
			}
			doc.Object, _ = o.(map[string]any)
			doc.node = &node
		}
		m.Docs = append(m.Docs, doc)
		return nil
	}
	for pos := 0; pos < len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += pos + 1
		}
		if isSeparator(data[pos:end]) {
			if err := flush(pos); err != nil {
				return nil, err
			}
			sep = data[pos:end]
			start, docLine = end, line+1
		}
		line++
		pos = end
	}
	if err := flush(len(data)); err != nil {
		return nil, err
	}
	return m, nil
}

// isSeparator follows k8s.io/apimachinery's YAML reader: "---" at the
// start of a line, followed by nothing but blanks or a comment.
func isSeparator(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("---")) {
		return false
	}
	rest := bytes.TrimSpace(line[3:])
	return len(rest) == 0 || rest[0] == '#'
}

// WriteTo writes the stream, replacing the changed documents.
func (m *Manifests) WriteTo(w io.Writer) (int64, error) {
	encoded := make([][]byte, len(m.Docs))
	errs := parallel(len(m.Docs), func(i int) (err error) {
		if m.Docs[i].Changed() {
			encoded[i], err = m.encode(m.Docs[i])
		}
		return err
	})
	var buf bytes.Buffer
	for i, d := range m.Docs {
		if errs[i] != nil {
			return 0, fmt.Errorf("line %d: %v", d.Line, errs[i])
		}
		buf.Write(d.Sep)
		if !d.Changed() {
			buf.Write(d.Raw)
			continue
		}
		buf.Write(encoded[i])
	}
	return buf.WriteTo(w)
}

// parallel runs f for 0..n-1 on GOMAXPROCS goroutines: documents are
// independent, and encoding YAML is what a large stream spends its time on.
func parallel(n int, f func(i int) error) []error {
	errs := make([]error, n)
	workers := runtime.GOMAXPROCS(0)
	if workers > n {
		workers = n
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				errs[i] = f(i)
			}
		}()
	}
	wg.Wait()
	return errs
}

func (m *Manifests) encode(d Document) ([]byte, error) {
	if m.Format == FormatJSON {
		return patchJSON(d.Raw, d.Ops)
	}
	b, err := patchYAML(d.Raw, d.node, d.Ops)
	if err != nil {
		// Documents the node editor cannot handle (aliases into edited
		// parts, say) are written from the object, with sorted keys.
		out, rerr := d.Result()
		if rerr != nil {
			return nil, rerr
		}
		if b, err = kubeyaml.Marshal(out); err != nil {
			return nil, err
		}
	}
	// Keep a document that had none without a trailing newline: the next
	// separator line starts right after it.
	if len(d.Raw) > 0 && d.Raw[len(d.Raw)-1] != '\n' {
		b = bytes.TrimSuffix(b, []byte("\n"))
	}
	return b, nil
}

// patchJSON applies ops to a JSON document, keeping its key order and,
// when it was indented, indenting the result.
func patchJSON(raw []byte, ops []PatchOp) ([]byte, error) {
	out, err := applyOps(raw, ops)
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(raw, []byte("\n")) {
		return out, nil
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "  "); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// docOps rebases a pod-template patch onto the document root.
func docOps(ops []PatchOp, prefix string, templatePath []string) []PatchOp {
	for _, p := range templatePath {
		prefix += "/" + escapePointer(p)
	}
	out := make([]PatchOp, len(ops))
	for i, op := range ops {
		op.Path = prefix + op.Path
		out[i] = op
	}
	return out
}

// jsonValue turns a decoded YAML value into the form encoding/json and
// unstructured objects use: string keys, int64 and float64 numbers.
func jsonValue(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("mapping key %v is not a string", k)
			}
			c, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	case []any:
		for i, e := range t {
			c, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	case int:
		return int64(t), nil
	case uint64:
		if t > math.MaxInt64 {
			return float64(t), nil
		}
		return int64(t), nil
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return nil, fmt.Errorf("%v cannot be represented in JSON", t)
		}
		return t, nil
	case string, bool, int64, nil:
		return t, nil
	case []byte:
		return base64.StdEncoding.EncodeToString(t), nil
	}
	return fmt.Sprint(v), nil
}

// ObjectReport says what happened to one object of a stream.
type ObjectReport struct {
	Object     string // Kind "namespace/name"
	Line       int
	Containers []string
	Injected   bool
	Warnings   []string
}

// InjectManifests mutates every Pod and workload in m (including the items
// of List objects), recording the changes in the documents' Ops.
func (i *Injector) InjectManifests(ctx context.Context, m *Manifests) ([]ObjectReport, error) {
	perDoc := make([][]ObjectReport, len(m.Docs))
	errs := parallel(len(m.Docs), func(di int) error {
		d := &m.Docs[di]
		d.Ops = nil
		if d.Object == nil {
			return nil
		}
		obj := &unstructured.Unstructured{Object: d.Object}
		if items, ok := d.Object["items"].([]any); ok && isList(obj) {
			for k, it := range items {
				im, ok := it.(map[string]any)
				if !ok {
					continue
				}
				r, err := i.mutateObject(ctx, &unstructured.Unstructured{Object: im}, false)
				if err != nil {
					return fmt.Errorf("line %d: items[%d]: %v", d.Line, k, err)
				}
				perDoc[di] = append(perDoc[di], report(r, d.Line))
				if r.Injected {
					d.Ops = append(d.Ops, docOps(r.Patch, "/items/"+strconv.Itoa(k), r.TemplatePath)...)
				}
			}
			return nil
		}
		r, err := i.mutateObject(ctx, obj, false)
		if err != nil {
			return fmt.Errorf("line %d: %v", d.Line, err)
		}
		perDoc[di] = append(perDoc[di], report(r, d.Line))
		if r.Injected {
			d.Ops = docOps(r.Patch, "", r.TemplatePath)
		}
		return nil
	})
	var reports []ObjectReport
	for di := range m.Docs {
		if errs[di] != nil {
			return reports, errs[di]
		}
		reports = append(reports, perDoc[di]...)
	}
	return reports, nil
}

func isList(obj *unstructured.Unstructured) bool {
	return strings.HasSuffix(obj.GetKind(), "List")
}

func report(r *ObjectResult, line int) ObjectReport {
	o := r.Object
	return ObjectReport{
		Object:     objectName(o.GetKind(), o.GetNamespace(), o.GetName(), o.GetGenerateName()),
		Line:       line,
		Containers: r.Containers,
		Injected:   r.Injected,
		Warnings:   r.Warnings,
	}
}
