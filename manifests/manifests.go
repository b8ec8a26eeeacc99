// Package manifests owns the manifest streams of restart-injector inject,
// uninject and explain: a stream of YAML or JSON documents read document
// by document (or whole), each Pod and workload handed to the injector's
// mutation, and the patch applied to the document's own node tree, so that
// comments, key order, styles and the untouched documents stay byte for
// byte; the undo record each changed object carries, and uninject, which
// follows it back and refuses what inject would not have written. The
// injector never imports this package: the webhook's mutation is the same
// code without any of it.
//
// YAML goes through two libraries, each with one job and an import name
// that says which: textyaml (go.yaml.in/yaml/v3) works on YAML text, the
// node trees that keep a manifest's comments, key order and styles;
// kubeyaml (sigs.k8s.io/yaml) writes a whole object the way kubectl does,
// through JSON with sorted keys, for the documents that cannot be patched
// in place.
package manifests

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	textyaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubeyaml "sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/internal/oneline"
	"github.com/restart-supervisor/restart-supervisor/internal/yamlbound"
	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
	"github.com/restart-supervisor/restart-supervisor/rules"
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
	Ops []injector.PatchOp
	// Err is why the document could not be read or injected; such a
	// document is written back as it was.
	Err error

	node    *textyaml.Node // the parsed YAML document, reused when writing
	format  Format
	decoded bool
	// ruleFree: the document carries no restart rules and nothing of the
	// injector's (rulefree.go); inject writes it back as it came in.
	ruleFree bool
	// out, when not nil, is what the document is written as (uninject).
	out []byte
	// roots are the objects Ops change ("" for the document, "/items/K"
	// for items of a List); each gets its undo record when written.
	roots []string
}

// Changed reports whether the document will be written differently.
func (d *Document) Changed() bool { return len(d.Ops) > 0 || d.out != nil }

// Result returns the changed object (Object with Ops applied).
func (d *Document) Result() (map[string]any, error) { return injector.ApplyPatch(d.Object, d.Ops) }

// ReadManifests parses a stream. JSON is recognised by a leading '{'.
// A document that cannot be parsed does not end the reading: it is kept
// with its Err set (written back as it was), and the error returned joins
// those of every such document, so all of them are named at once. The
// Manifests are nil only when the stream cannot be split into documents
// (a document larger than MaxDocumentBytes).
func ReadManifests(data []byte) (*Manifests, error) {
	rd := NewReader(bytes.NewReader(data))
	m := &Manifests{}
	var errs []error
	for {
		d, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(m.Docs) == 0 {
			m.Format = d.format
		}
		if d.Err = d.Decode(); d.Err != nil {
			errs = append(errs, d.Err)
		}
		m.Docs = append(m.Docs, *d)
	}
	return m, errors.Join(errs...)
}

// decodeYAMLDoc fills in doc.Object from doc.Raw.
func decodeYAMLDoc(doc *Document) error {
	var node textyaml.Node
	if err := textyaml.Unmarshal(doc.Raw, &node); err != nil {
		return fmt.Errorf("document at line %d: %s", doc.Line, oneline.Error(err))
	}
	// A document without rules is written back whatever it holds: what
	// cannot be decoded below is no error for it (rulefree.go).
	doc.ruleFree = ruleFreeTree(&node)
	fail := func(err error) error {
		if doc.ruleFree {
			return nil
		}
		return fmt.Errorf("document at line %d: %v", doc.Line, err)
	}
	// Before any decoding into values: yaml.v3's own check of repeated
	// keys, and aliases, cost far more than the document's size.
	if err := yamlbound.Check(&node, yamlbound.Default); err != nil {
		return fail(err)
	}
	if node.Kind == textyaml.DocumentNode && len(node.Content) == 1 && node.Content[0].Kind == textyaml.MappingNode {
		var obj any
		if err := node.Decode(&obj); err != nil {
			return fail(errors.New(oneline.Error(err)))
		}
		o, err := jsonValue(obj)
		if err != nil {
			return fail(err)
		}
		doc.Object, _ = o.(map[string]any)
		doc.node = &node
	}
	return nil
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
		if m.Docs[i].out != nil {
			encoded[i] = m.Docs[i].out
		} else if m.Docs[i].Changed() {
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
	if d.format == FormatJSON {
		ops := d.Ops
		// The undo record is worked out on the document's node tree,
		// which keeps its key order. JSON the YAML reader does not
		// take (duplicate keys) is injected without one; uninject then
		// names it.
		if doc, ok := jsonTree(d.Raw); ok && d.roots != nil {
			owned := map[*textyaml.Node]bool{}
			rec, err := applyWithUndo(yamledit.Own(owned, doc.Content[0]), owned, ops, d.roots, true, false)
			if err != nil {
				return nil, err
			}
			ops = append(append([]injector.PatchOp(nil), ops...), rec...)
		}
		return patchJSON(d.Raw, ops)
	}
	b, err := patchYAML(d.Raw, d.node, d.Ops, d.roots)
	if err != nil {
		// Documents the node editor cannot handle (aliases into edited
		// parts, say) are written from the object, with sorted keys.
		if b, err = marshalResult(d); err != nil {
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

// jsonTree parses a JSON value as a YAML node tree. Invalid UTF-8 is
// replaced as encoding/json replaces it.
func jsonTree(raw []byte) (*textyaml.Node, bool) {
	var doc textyaml.Node
	if err := textyaml.Unmarshal(bytes.ToValidUTF8(raw, []byte("\uFFFD")), &doc); err != nil || doc.Kind != textyaml.DocumentNode || len(doc.Content) != 1 {
		return nil, false
	}
	// Repeated keys: the tree's values are decoded (digests of the undo
	// record), which would cost their square.
	if yamlbound.Check(&doc, yamlbound.Default) != nil {
		return nil, false
	}
	return &doc, true
}

// marshalResult writes d's object with Ops applied, with sorted keys and
// aliases expanded, and its undo record worked out on that form.
func marshalResult(d Document) ([]byte, error) {
	ops := d.Ops
	if d.roots != nil {
		var n textyaml.Node
		if err := n.Encode(d.Object); err != nil {
			return nil, err
		}
		owned := map[*textyaml.Node]bool{}
		rec, err := applyWithUndoText(yamledit.Own(owned, &n), owned, ops, d.roots, false, false, string(d.Raw))
		if err != nil {
			return nil, err
		}
		ops = append(append([]injector.PatchOp(nil), ops...), rec...)
	}
	out, err := injector.ApplyPatch(d.Object, ops)
	if err != nil {
		return nil, err
	}
	return kubeyaml.Marshal(out)
}

// patchJSON applies ops to a JSON document, keeping its key order and,
// when it was indented, indenting the result.
func patchJSON(raw []byte, ops []injector.PatchOp) ([]byte, error) {
	out, err := injector.ApplyPatchJSON(raw, ops)
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
	// Skipped says why an object carrying restart rules was left as it
	// is (see injector.ObjectResult.Skipped).
	Skipped string
}

// Inject mutates, with i, every Pod and workload in m (including the items
// of List objects), recording the changes in the documents' Ops. A
// document that cannot be injected gets its Err set and no Ops; the
// others are injected all the same, and the error returned joins those of
// every failed document.
func Inject(ctx context.Context, i *injector.Injector, m *Manifests) ([]ObjectReport, error) {
	perDoc := make([][]ObjectReport, len(m.Docs))
	errs := parallel(len(m.Docs), func(di int) (err error) {
		perDoc[di], err = injectDoc(ctx, i, &m.Docs[di])
		return err
	})
	var reports []ObjectReport
	var failed []error
	for di := range m.Docs {
		if errs[di] != nil {
			// The document is written back as it was; the others
			// are still injected.
			m.Docs[di].Ops, m.Docs[di].roots, m.Docs[di].Err = nil, nil, errs[di]
			failed = append(failed, errs[di])
			continue
		}
		reports = append(reports, perDoc[di]...)
	}
	return reports, errors.Join(failed...)
}

// injectDoc records the injection of every object of d in d.Ops.
func injectDoc(ctx context.Context, i *injector.Injector, d *Document) ([]ObjectReport, error) {
	d.Ops, d.roots, d.out = nil, nil, nil
	if d.Object == nil || d.ruleFree {
		return nil, nil
	}
	var reports []ObjectReport
	obj := &unstructured.Unstructured{Object: d.Object}
	if items, ok := d.Object["items"].([]any); ok && injector.IsList(obj) {
		for k, it := range items {
			im, ok := it.(map[string]any)
			if !ok {
				continue
			}
			r, err := i.ObjectPatch(ctx, &unstructured.Unstructured{Object: im})
			if err != nil {
				d.Ops, d.roots = nil, nil
				return nil, fmt.Errorf("line %d: items[%d]: %v", d.Line, k, err)
			}
			reports = append(reports, report(r, d.Line))
			if r.Injected {
				root := "/items/" + strconv.Itoa(k)
				d.Ops = append(d.Ops, injector.PrefixOps(r.Patch, root)...)
				d.roots = append(d.roots, root)
			}
		}
		return reports, nil
	}
	r, err := i.ObjectPatch(ctx, obj)
	if err != nil {
		return nil, fmt.Errorf("line %d: %v", d.Line, err)
	}
	reports = append(reports, report(r, d.Line))
	if r.Injected {
		d.Ops, d.roots = r.Patch, []string{""}
	}
	return reports, nil
}

func report(r *injector.ObjectResult, line int) ObjectReport {
	o := r.Object
	return ObjectReport{
		Object:     injector.ObjectName(o.GetKind(), o.GetNamespace(), o.GetName(), o.GetGenerateName()),
		Line:       line,
		Containers: r.Containers,
		Injected:   r.Injected,
		Warnings:   r.Warnings,
		Skipped:    r.Skipped,
	}
}

// ExplainManifests explains every Pod and workload template in m,
// including the items of List objects, validated like release v.
func ExplainManifests(m *Manifests, v rules.KubeVersion) ([]injector.ObjectPlan, error) {
	var out []injector.ObjectPlan
	var visit func(obj map[string]any, line int) error
	visit = func(obj map[string]any, line int) error {
		u := &unstructured.Unstructured{Object: obj}
		if items, ok := obj["items"].([]any); ok && injector.IsList(u) {
			for _, it := range items {
				if im, ok := it.(map[string]any); ok {
					if err := visit(im, line); err != nil {
						return err
					}
				}
			}
			return nil
		}
		plans, err := injector.ExplainObject(obj, v)
		out = append(out, plans...)
		if err != nil {
			return fmt.Errorf("line %d: %v", line, err)
		}
		return nil
	}
	for _, d := range m.Docs {
		if d.Object != nil {
			if err := visit(d.Object, d.Line); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}
