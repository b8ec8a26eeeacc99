package manifests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	textyaml "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/internal/oneline"
	"github.com/restart-supervisor/restart-supervisor/internal/yamlbound"
	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
	"github.com/restart-supervisor/restart-supervisor/internal/yamlstyle"
)

// UninjectManifests turns every object of m that `inject` changed back into
// what it was before, from the undo record inject left on it
// (contract.AnnotationUndo), recording the text to write in each such document. An
// object without a record is left as it is: one that shows the status
// annotation (wrapped by the webhook, or before inject saw it) gets a
// warning in its report. A document whose record cannot be followed (the
// wrap was edited since) gets its Err set and is written back unchanged;
// the error returned joins those of every such document.
func UninjectManifests(m *Manifests) ([]ObjectReport, error) {
	perDoc := make([][]ObjectReport, len(m.Docs))
	errs := parallel(len(m.Docs), func(di int) error {
		var err error
		perDoc[di], err = uninjectDoc(&m.Docs[di])
		return err
	})
	var reports []ObjectReport
	var failed []error
	for di := range m.Docs {
		if errs[di] != nil {
			m.Docs[di].out, m.Docs[di].Err = nil, errs[di]
			failed = append(failed, errs[di])
			continue
		}
		reports = append(reports, perDoc[di]...)
	}
	return reports, errors.Join(failed...)
}

// uninjectDoc sets d.out when d changes.
func uninjectDoc(d *Document) ([]ObjectReport, error) {
	d.Ops, d.roots, d.out = nil, nil, nil
	if d.Object == nil {
		return nil, nil
	}
	type target struct {
		root   string
		obj    map[string]any
		record string
		name   string
	}
	var objs []target
	if items, ok := d.Object["items"].([]any); ok && injector.IsList(&unstructured.Unstructured{Object: d.Object}) {
		for k, it := range items {
			if im, ok := it.(map[string]any); ok {
				objs = append(objs, target{root: "/items/" + strconv.Itoa(k), obj: im})
			}
		}
	} else {
		objs = append(objs, target{obj: d.Object})
	}
	var reports []ObjectReport
	var todo []target
	for _, t := range objs {
		u := &unstructured.Unstructured{Object: t.obj}
		name := injector.ObjectName(u.GetKind(), u.GetNamespace(), u.GetName(), u.GetGenerateName())
		rec, ok := u.GetAnnotations()[contract.AnnotationUndo]
		if !ok {
			if wrappedTemplates(u) {
				reports = append(reports, ObjectReport{Object: name, Line: d.Line, Warnings: []string{fmt.Sprintf(
					"line %d: %s is wrapped but carries no %s annotation (injected by the webhook, or before inject saw it); left unchanged", d.Line, name, contract.AnnotationUndo)}})
			}
			continue
		}
		t.record, t.name = rec, name
		todo = append(todo, t)
		reports = append(reports, ObjectReport{Object: name, Line: d.Line, Injected: true})
	}
	if len(todo) == 0 {
		return reports, nil
	}

	var doc textyaml.Node
	if d.node != nil {
		doc = *d.node
	} else if t, ok := jsonTree(d.Raw); ok {
		doc = *t
	} else {
		return nil, fmt.Errorf("line %d: %s: the JSON value cannot be read as a tree (duplicate keys?); it is left as it is", d.Line, todo[0].name)
	}
	owned := map[*textyaml.Node]bool{}
	doc.Content = []*textyaml.Node{yamledit.Own(owned, doc.Content[0])}
	var text string
	for _, t := range todo {
		var err error
		if text, err = undoObject(doc.Content[0], owned, t.root, t.record, templatePrefixes(t.obj)); err != nil {
			return nil, fmt.Errorf("line %d: %s: %v", d.Line, t.name, err)
		}
	}
	if text != "" && len(todo) == 1 && todo[0].root == "" && sameObject(&doc, text) {
		// Written from its object by inject, and not edited since: the
		// document as it was, anchors, comments and all.
		d.out = []byte(text)
		return reports, nil
	}

	var out []byte
	if d.format == FormatJSON {
		var b bytes.Buffer
		if err := nodeJSON(&b, &doc); err != nil {
			return nil, fmt.Errorf("line %d: %v", d.Line, err)
		}
		out = b.Bytes()
		if bytes.Contains(d.Raw, []byte("\n")) {
			var ind bytes.Buffer
			if err := json.Indent(&ind, out, "", "  "); err != nil {
				return nil, fmt.Errorf("line %d: %v", d.Line, err)
			}
			out = ind.Bytes()
		}
	} else {
		s, err := yamledit.Encode(&doc, yamlstyle.CompactSequences(d.Raw, true))
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", d.Line, err)
		}
		out = []byte(s)
		if len(d.Raw) > 0 && d.Raw[len(d.Raw)-1] != '\n' {
			out = bytes.TrimSuffix(out, []byte("\n"))
		}
	}
	d.out = out
	return reports, nil
}

// wrappedTemplates: a pod template of u has the status annotation.
func wrappedTemplates(u *unstructured.Unstructured) bool {
	ts, err := injector.Templates(u.Object)
	if err != nil {
		return false
	}
	for _, t := range ts {
		meta, _ := t.Object["metadata"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		if _, ok := ann[contract.AnnotationStatus]; ok {
			return true
		}
	}
	return false
}

// undoObject takes the injection of the object at root back, following
// record, whose operations must each undo an edit inject makes to one of
// the pod templates at templates (checkUndoOp). Errors name the field.
// It returns the record's Text.
func undoObject(doc *textyaml.Node, owned map[*textyaml.Node]bool, root, record string, templates []string) (string, error) {
	rec, err := undoObjectRecord(doc, owned, root, record, templates)
	return rec.Text, err
}

// sameObject: the tree doc and the YAML text hold the same object.
func sameObject(doc *textyaml.Node, text string) bool {
	var a, b any
	if err := doc.Decode(&a); err != nil {
		return false
	}
	var tn textyaml.Node
	if err := textyaml.Unmarshal([]byte(text), &tn); err != nil || yamlbound.Check(&tn, yamlbound.Default) != nil {
		return false
	}
	if err := tn.Decode(&b); err != nil {
		return false
	}
	ja, err1 := jsonValue(a)
	jb, err2 := jsonValue(b)
	if err1 != nil || err2 != nil {
		return false
	}
	x, _ := json.Marshal(ja)
	y, _ := json.Marshal(jb)
	return bytes.Equal(x, y)
}

func undoObjectRecord(doc *textyaml.Node, owned map[*textyaml.Node]bool, root, record string, templates []string) (undoRecord, error) {
	recField := "metadata.annotations[" + contract.AnnotationUndo + "]"
	var rec undoRecord
	dec := json.NewDecoder(strings.NewReader(record))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, fmt.Errorf("%s: invalid: %s", recField, oneline.Error(err))
	}
	// The record is text anyone who edits the file may have written: it
	// is followed only where it undoes what inject does, so that it can
	// never add to the object what inject could not have taken out
	// (privileged, hostPID, another image).
	for _, u := range rec.Undo {
		if err := checkUndoOp(u, templates, doc, root); err != nil {
			return rec, fmt.Errorf("%s: %v", recField, err)
		}
	}
	return rec, undoRecordOps(doc, owned, root, rec)
}

// templatePrefixes are the JSON Pointers of obj's pod templates, "" for
// a Pod.
func templatePrefixes(obj map[string]any) []string {
	ts, err := injector.Templates(obj)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Pointer)
	}
	return out
}

// undoFields are, per operation of an undo record, the fields of a
// wrapped container whose edit by inject that operation undoes: inject
// adds startupProbe, readinessProbe, lifecycle, command, env and volumeMounts
// (undone by remove, or by replace where the container had its own), and
// takes restartPolicyRules, restartPolicy and livenessProbe out (undone by
// insert). mutation.wrap makes these edits.
var undoFields = map[string]map[string]bool{
	"remove":  {"startupProbe": true, "readinessProbe": true, "command": true, "env": true, "volumeMounts": true, "lifecycle": true},
	"replace": {"startupProbe": true, "readinessProbe": true, "livenessProbe": true, "command": true, "lifecycle": true},
	"insert":  {"restartPolicyRules": true, "restartPolicy": true, "livenessProbe": true},
}

// checkUndoOp refuses an operation that undoes no edit inject makes to a
// pod template at one of templates: its op and path must be one of those
// of mutate (the template's restart-supervisor.dev annotations, the
// volumes and init containers it adds, the fields of a container in
// undoFields, an item it appends to env or volumeMounts), and the member
// an insert gives back must be the one its path names.
//
// A replace of what inject adds to (fillsNull) must give back a value
// within the one at its path in doc (the object, at root): inject only
// adds there, so the undo may only take away.
func checkUndoOp(u undoOp, templates []string, doc *textyaml.Node, root string) error {
	bad := fmt.Errorf("%s %q: not an edit restart-injector inject makes; refusing to follow the record", u.Op, oneline.Clip(u.Path, 128))
	if _, ok := undoFields[u.Op]; !ok {
		return bad
	}
	for _, t := range templates {
		rest, ok := strings.CutPrefix(u.Path, t+"/")
		if !ok {
			continue
		}
		toks, err := yamledit.PointerTokens("/" + rest)
		if err != nil {
			return bad
		}
		if undoable(u.Op, toks) {
			if u.Op == "insert" || u.Op == "replace" {
				budget := yamlbound.Default
				key, val, err := wasMember(u.Was, &budget)
				if err != nil || key.Kind != textyaml.ScalarNode || key.Value != toks[len(toks)-1] {
					return fmt.Errorf("%s %q: the value it gives back is not that member; refusing to follow the record", u.Op, oneline.Clip(u.Path, 128))
				}
				if u.Op == "replace" && fillsNull(toks) {
					cur, err := yamledit.NodeAt(doc, root+u.Path)
					if err == nil && len(toks) == 1 {
						// metadata: inject writes it from the typed
						// object, without the members ObjectMeta does
						// not know (as the API server drops them).
						val = knownMetadata(val)
					}
					steps := withinSteps
					if err != nil || !within(val, cur, &steps) {
						return fmt.Errorf("%s %q: gives back what the document does not hold, where inject only adds; refusing to follow the record", u.Op, oneline.Clip(u.Path, 128))
					}
				}
			}
			return nil
		}
	}
	return bad
}

// fillsNull: toks (relative to a pod template) names a mapping or list
// that inject adds to and may replace whole: when the template holds it
// as an empty value (`metadata:`, `volumes:`, `env:` with nothing after
// them), or where the text editor rewrites the whole value (unusual
// indentation). Its record then gives back the value before: checkUndoOp
// lets it give back only what the value holds now (within).
func fillsNull(toks []string) bool {
	switch len(toks) {
	case 1:
		return toks[0] == "metadata"
	case 2:
		return toks[0] == "metadata" && toks[1] == "annotations" ||
			toks[0] == "spec" && (toks[1] == "volumes" || toks[1] == "initContainers")
	case 4:
		return toks[0] == "spec" && (toks[3] == "env" || toks[3] == "volumeMounts")
	}
	return false
}

// objectMetaFields are the members of metav1.ObjectMeta, by JSON name.
var objectMetaFields = func() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeOf(metav1.ObjectMeta{})
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		m[name] = true
	}
	return m
}()

// knownMetadata is the metadata mapping n with only the members ObjectMeta
// knows: what the API server would keep of it.
func knownMetadata(n *textyaml.Node) *textyaml.Node {
	if n.Kind != textyaml.MappingNode {
		return n
	}
	out := *n
	out.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		if objectMetaFields[n.Content[i].Value] {
			out.Content = append(out.Content, n.Content[i], n.Content[i+1])
		}
	}
	return &out
}

// withinSteps is what one check of within may cost: a few milliseconds,
// and far more than a real template's metadata or env lists need.
const withinSteps = 1 << 22

// within: was holds nothing that cur does not: null; a scalar equal to
// cur; a mapping whose every member with a value cur has, with a value
// within cur's (inject drops a member without a value, `{A}` or A: an empty string,
// that metadata does not know, as the API server would);
// a sequence whose items are within cur's items, in order (inject
// inserts and appends items). Aliases are refused.
//
// steps bounds the work: both trees come from the file, and a sequence or
// mapping matched against another costs their product. Past it the value
// is not within, and the record is refused.
func within(was, cur *textyaml.Node, steps *int) bool {
	if *steps--; *steps < 0 {
		return false
	}
	if was.Kind == textyaml.ScalarNode && was.ShortTag() == "!!null" {
		return true
	}
	if was.Kind != cur.Kind {
		return false
	}
	switch was.Kind {
	case textyaml.ScalarNode:
		return was.Value == cur.Value && was.ShortTag() == cur.ShortTag()
	case textyaml.MappingNode:
		for i := 0; i+1 < len(was.Content); i += 2 {
			k := was.Content[i]
			if k.Kind != textyaml.ScalarNode {
				return false
			}
			if *steps -= len(cur.Content) / 2; *steps < 0 {
				return false // yamledit.Member scans cur's members
			}
			v, c := was.Content[i+1], yamledit.Member(cur, k.Value)
			if v.Kind == textyaml.ScalarNode && v.Value == "" {
				continue // a member without a value (null, empty) gives nothing back
			}
			if c == nil || !within(v, c, steps) {
				return false
			}
		}
		return true
	case textyaml.SequenceNode:
		j := 0
		for _, w := range was.Content {
			for j < len(cur.Content) && !within(w, cur.Content[j], steps) {
				j++
			}
			if j == len(cur.Content) {
				return false
			}
			j++
		}
		return true
	}
	return false
}

// undoable: op at toks (relative to a pod template) undoes an edit of
// mutate.
func undoable(op string, toks []string) bool {
	isIndex := func(s string) bool {
		_, err := strconv.Atoi(s)
		return err == nil && s != "" && (s == "0" || s[0] != '0')
	}
	containers := func(s string) bool { return s == "containers" || s == "initContainers" }
	switch {
	case toks[0] == "metadata":
		switch len(toks) {
		case 1, 2:
			return (op == "remove" || op == "replace" && fillsNull(toks)) && (len(toks) == 1 || toks[1] == "annotations")
		case 3:
			return toks[1] == "annotations" && strings.HasPrefix(toks[2], "restart-supervisor.dev/") && (op == "remove" || op == "replace")
		}
	case toks[0] == "spec" && len(toks) >= 2:
		switch {
		case len(toks) == 2:
			return (op == "remove" || op == "replace" && fillsNull(toks)) && (toks[1] == "volumes" || toks[1] == "initContainers")
		case len(toks) == 3:
			return op == "remove" && (toks[1] == "volumes" || toks[1] == "initContainers") && isIndex(toks[2])
		case len(toks) == 4:
			return containers(toks[1]) && isIndex(toks[2]) && (undoFields[op][toks[3]] || op == "replace" && fillsNull(toks))
		case len(toks) == 5:
			return op == "remove" && containers(toks[1]) && isIndex(toks[2]) && (toks[3] == "env" || toks[3] == "volumeMounts") && isIndex(toks[4])
		}
	}
	return false
}

func undoRecordOps(doc *textyaml.Node, owned map[*textyaml.Node]bool, root string, rec undoRecord) error {
	recField := "metadata.annotations[" + contract.AnnotationUndo + "]"
	// The record itself goes first: it was written last.
	meta, err := yamledit.OwnedPath(doc, owned, root+"/metadata")
	if err != nil {
		return fmt.Errorf("%s: %v", recField, err)
	}
	ann := yamledit.Member(meta, "annotations")
	if ann == nil {
		return fmt.Errorf("%s: missing", recField)
	}
	ann, err = yamledit.OwnedPath(doc, owned, root+"/metadata/annotations")
	if err != nil {
		return fmt.Errorf("%s: %v", recField, err)
	}
	yamledit.DeleteMember(ann, contract.AnnotationUndo)
	switch rec.Made {
	case "":
	case "annotations", "metadata":
		if len(ann.Content) == 0 {
			yamledit.DeleteMember(meta, "annotations")
		}
		if rec.Made == "metadata" && len(meta.Content) == 0 {
			obj, err := yamledit.OwnedPath(doc, owned, root)
			if err != nil {
				return err
			}
			yamledit.DeleteMember(obj, "metadata")
		}
	default:
		return fmt.Errorf("%s: invalid: made %q", recField, rec.Made)
	}
	// What the record gives back is decoded too (digests): its members
	// share one budget.
	budget := yamlbound.Default
	for k := len(rec.Undo) - 1; k >= 0; k-- {
		u := rec.Undo[k]
		if err := undoOne(doc, owned, root, u, &budget); err != nil {
			return fmt.Errorf("%s: %v", yamledit.FieldPath(u.Path), err)
		}
	}
	return nil
}

// edited is the message for a part of the wrap that is not as inject
// wrote it: the inverse would have to guess.
const edited = "changed since restart-injector inject wrote it; restore it, or edit the original manifest and inject it again"

func undoOne(doc *textyaml.Node, owned map[*textyaml.Node]bool, root string, u undoOp, budget *yamlbound.Budget) error {
	toks, err := yamledit.PointerTokens(u.Path)
	if err != nil || len(toks) == 0 {
		return fmt.Errorf("invalid path in %s", contract.AnnotationUndo)
	}
	last := toks[len(toks)-1]
	parentPath := root + u.Path[:len(u.Path)-len(yamledit.EscapeToken(last))-1]
	parent, err := yamledit.OwnedPath(doc, owned, parentPath)
	if err != nil {
		return fmt.Errorf("%v: %s", err, edited)
	}
	switch u.Op {
	case "remove", "replace":
		i, err := yamledit.ChildIndex(parent, last)
		if err != nil {
			return fmt.Errorf("missing: %s", edited)
		}
		sum, err := nodeDigest(parent.Content[i])
		if err != nil || sum != u.Sum {
			return fmt.Errorf("%s", edited)
		}
		if u.Op == "replace" {
			_, val, err := wasMember(u.Was, budget)
			if err != nil {
				return err
			}
			parent.Content[i] = val
			return nil
		}
		if parent.Kind == textyaml.MappingNode {
			parent.Content = append(parent.Content[:i-1], parent.Content[i+1:]...)
		} else {
			parent.Content = append(parent.Content[:i], parent.Content[i+1:]...)
		}
		return nil
	case "insert":
		key, val, err := wasMember(u.Was, budget)
		if err != nil {
			return err
		}
		switch parent.Kind {
		case textyaml.MappingNode:
			if yamledit.Member(parent, last) != nil {
				return fmt.Errorf("present again: %s", edited)
			}
			at := 2 * u.At
			if u.At < 0 || at > len(parent.Content) {
				return fmt.Errorf("position %d out of range: %s", u.At, edited)
			}
			parent.Content = append(parent.Content[:at], append([]*textyaml.Node{key, val}, parent.Content[at:]...)...)
			return nil
		case textyaml.SequenceNode:
			i, err := yamledit.Index(last, len(parent.Content)+1)
			if err != nil {
				return fmt.Errorf("%v: %s", err, edited)
			}
			parent.Content = append(parent.Content[:i], append([]*textyaml.Node{val}, parent.Content[i:]...)...)
			return nil
		}
		return fmt.Errorf("parent is neither a mapping nor a sequence: %s", edited)
	}
	return fmt.Errorf("unknown operation %q in %s", u.Op, contract.AnnotationUndo)
}

// wasMember parses an undoOp's Was, within what is left of budget.
func wasMember(was string, budget *yamlbound.Budget) (key, val *textyaml.Node, err error) {
	var d textyaml.Node
	if err := textyaml.Unmarshal([]byte(was), &d); err != nil {
		return nil, nil, fmt.Errorf("invalid value in %s: %s", contract.AnnotationUndo, oneline.Error(err))
	}
	if err := budget.Take(&d); err != nil {
		return nil, nil, fmt.Errorf("invalid value in %s: %v", contract.AnnotationUndo, err)
	}
	if d.Kind != textyaml.DocumentNode || len(d.Content) != 1 || d.Content[0].Kind != textyaml.MappingNode || len(d.Content[0].Content) != 2 {
		return nil, nil, fmt.Errorf("invalid value in %s: want one member", contract.AnnotationUndo)
	}
	return d.Content[0].Content[0], d.Content[0].Content[1], nil
}
