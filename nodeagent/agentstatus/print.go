package agentstatus

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/liggitt/tabwriter"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// The formats of StatusPrinter, as kubectl get's -o.
const (
	FormatTable = ""
	FormatWide  = "wide"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
	FormatName  = "name"
)

// StatusFormats are the -o values StatusPrinter knows.
var StatusFormats = []string{FormatWide, FormatJSON, FormatYAML, FormatName}

// ContainerRestartsKind and StatusAPIVersion name the objects of -o json
// and -o yaml. No API server serves them: they are what status prints, in
// the shape of a Kubernetes object so that kubectl's tools (jq paths,
// yq, -o name) read them as they read any other.
const (
	ContainerRestartsKind = "ContainerRestarts"
	StatusAPIVersion      = "restart-supervisor.dev/v1alpha1"
)

// ContainerRestarts is one row of status as an object: metadata names the
// pod.
type ContainerRestarts struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Container         string `json:"container"`
	// Node is the node whose agent recorded the restarts.
	Node string `json:"node,omitempty"`
	// Restarts is the container's in-place restarts so far.
	Restarts int `json:"restarts"`
	// LastExit is the exit that caused the last restart.
	LastExit *ExitInfo `json:"lastExit,omitempty"`
	// Rule is the index of the rule that matched; absent for the
	// container policy.
	Rule           *int   `json:"rule,omitempty"`
	Action         string `json:"action,omitempty"`
	BackoffSeconds int64  `json:"backoffSeconds"`
	// PodRestarts is the pod's pod-wide restarts (RestartAllContainers).
	PodRestarts     uint64      `json:"podRestarts"`
	LastRestartTime metav1.Time `json:"lastRestartTime"`
}

// ExitInfo is an exit code, and the signal's name for 128+N.
type ExitInfo struct {
	ExitCode int32  `json:"exitCode"`
	Signal   string `json:"signal,omitempty"`
}

// DeepCopyObject makes ContainerRestarts a runtime.Object for the
// printers, which only read it.
func (c *ContainerRestarts) DeepCopyObject() runtime.Object { cp := *c; return &cp }

// ContainerRestartsList is -o json and -o yaml of a listing: a v1 List,
// as kubectl get prints one.
type ContainerRestartsList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []ContainerRestarts `json:"items"`
}

// DeepCopyObject makes ContainerRestartsList a runtime.Object.
func (l *ContainerRestartsList) DeepCopyObject() runtime.Object { cp := *l; return &cp }

// Object is r as printed by -o json and -o yaml.
func (r StatusRow) Object() *ContainerRestarts {
	o := &ContainerRestarts{
		TypeMeta:   metav1.TypeMeta{APIVersion: StatusAPIVersion, Kind: ContainerRestartsKind},
		ObjectMeta: metav1.ObjectMeta{Name: agentapi.Clean(r.Pod), Namespace: agentapi.Clean(r.Namespace), UID: types.UID(agentapi.Clean(r.UID))},
		Container:  agentapi.Clean(r.Container), Node: agentapi.Clean(r.Node), Restarts: r.Total, Rule: r.Rule, Action: agentapi.Clean(r.Action),
		BackoffSeconds: r.BackoffSeconds, PodRestarts: r.PodRestarts, LastRestartTime: metav1.NewTime(r.Last.UTC()),
	}
	if r.ExitCode != nil {
		o.LastExit = &ExitInfo{ExitCode: *r.ExitCode, Signal: agentapi.Clean(r.Signal)}
	}
	return o
}

// statusColumns are the table's columns; NODE and POD UID only in wide.
var statusColumns = []metav1.TableColumnDefinition{
	{Name: "Pod", Type: "string", Format: "name"},
	{Name: "Container", Type: "string"},
	{Name: "In-place restarts", Type: "integer"},
	{Name: "Last exit", Type: "string"},
	{Name: "Rule", Type: "string"},
	{Name: "Back-off", Type: "string"},
	{Name: "Pod restarts", Type: "integer"},
	{Name: "Last restart", Type: "string"},
	{Name: "Node", Type: "string", Priority: 1},
	{Name: "Pod UID", Type: "string", Priority: 1},
}

// StatusTable is rows as a metav1.Table, as an API server answers kubectl
// get: each row carries its object, so the printer can add the namespace.
func StatusTable(rows []StatusRow, now time.Time) *metav1.Table {
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}, ColumnDefinitions: statusColumns}
	for _, r := range rows {
		exit := "unknown"
		if r.ExitCode != nil {
			exit = strings.TrimPrefix(r.ExitText(), "exit code ")
		}
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells: []any{agentapi.Clean(r.Pod), agentapi.Clean(r.Container), int64(r.Total), exit, r.RuleText(),
				strings.TrimPrefix(r.BackoffText(), "back-off "), int64(r.PodRestarts),
				duration.HumanDuration(now.Sub(r.Last)) + " ago", agentapi.Clean(r.Node), agentapi.Clean(r.UID)},
			Object: runtime.RawExtension{Object: r.Object()},
		})
	}
	return t
}

// StatusPrinter prints rows in one of StatusFormats, with kubectl's
// printers (k8s.io/cli-runtime/pkg/printers): a table (NAMESPACE first
// with AllNamespaces, the header once), a v1 List of ContainerRestarts for
// json and yaml, pod/NAME once per pod for name.
type StatusPrinter struct {
	Format        string
	AllNamespaces bool
	NoHeaders     bool
	Now           func() time.Time

	printed   bool            // the header is out
	namesSeen map[string]bool // -o name: each pod once
	tw        *tabwriter.Writer
	out       io.Writer
}

// Print prints a listing.
func (p *StatusPrinter) Print(w io.Writer, rows []StatusRow) error {
	switch p.Format {
	case FormatJSON, FormatYAML:
		l := &ContainerRestartsList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: []ContainerRestarts{}}
		for _, r := range rows {
			l.Items = append(l.Items, *r.Object())
		}
		return p.object(l, w)
	}
	return p.rows(w, rows)
}

// PrintChange prints one row a watch reported: a table row without a
// second header, one object per change for json and yaml, a pod's name
// the first time it changes.
func (p *StatusPrinter) PrintChange(w io.Writer, r StatusRow) error {
	switch p.Format {
	case FormatJSON, FormatYAML:
		return p.object(r.Object(), w)
	}
	return p.rows(w, []StatusRow{r})
}

func (p *StatusPrinter) object(o runtime.Object, w io.Writer) error {
	if p.Format == FormatJSON {
		return (&printers.JSONPrinter{}).PrintObj(o, w)
	}
	return (&printers.YAMLPrinter{}).PrintObj(o, w)
}

func (p *StatusPrinter) rows(w io.Writer, rows []StatusRow) error {
	switch p.Format {
	case FormatName:
		if p.namesSeen == nil {
			p.namesSeen = map[string]bool{}
		}
		for _, r := range rows {
			k := r.Namespace + "/" + r.Pod
			if p.namesSeen[k] {
				continue
			}
			p.namesSeen[k] = true
			pod := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
				ObjectMeta: metav1.ObjectMeta{Name: agentapi.Clean(r.Pod), Namespace: agentapi.Clean(r.Namespace)}}
			if err := (&printers.NamePrinter{}).PrintObj(pod, w); err != nil {
				return err
			}
		}
		return nil
	case FormatTable, FormatWide:
		now := time.Now
		if p.Now != nil {
			now = p.Now
		}
		tp := printers.NewTablePrinter(printers.PrintOptions{
			Wide: p.Format == FormatWide, WithNamespace: p.AllNamespaces, NoHeaders: p.NoHeaders || p.printed})
		p.printed = true
		// One tab writer for every print: liggitt/tabwriter remembers
		// the column widths across flushes, so the rows of a watch line
		// up under the listing's header, as kubectl get -w's.
		if p.tw == nil || p.out != w {
			p.tw, p.out = printers.GetNewTabWriter(w), w
		}
		if err := tp.PrintObj(StatusTable(rows, now()), p.tw); err != nil {
			return err
		}
		return p.tw.Flush()
	}
	return fmt.Errorf("unknown output format %q", p.Format)
}

// WriteStatus prints rows as a table, with a NAMESPACE column when
// allNamespaces.
func WriteStatus(w io.Writer, rows []StatusRow, allNamespaces bool, now time.Time) error {
	return (&StatusPrinter{AllNamespaces: allNamespaces, Now: func() time.Time { return now }}).Print(w, rows)
}
