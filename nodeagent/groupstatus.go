package nodeagent

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
)

// The group lines of status: one row per GroupRestart object (group.go),
// read from what the node agents wrote into it, so that an operator sees
// a group's restarts, its limit, the exit that asked for the last one and
// how far its current round has come, as the container rows show one
// container's.

var groupColumns = []metav1.TableColumnDefinition{
	{Name: "Group", Type: "string"},
	{Name: "Restarts", Type: "integer"},
	{Name: "Limit", Type: "string"},
	{Name: "Last Cause", Type: "string"},
	{Name: "Last", Type: "string"},
	{Name: "Round", Type: "string"},
	{Name: "Object", Type: "string", Priority: 1},
}

// GroupTable is the GroupRestart objects as a metav1.Table, sorted by
// namespace and group.
func GroupTable(items []unstructured.Unstructured, now time.Time) *metav1.Table {
	groups := make([]groupState, 0, len(items))
	for i := range items {
		groups = append(groups, groupFromObject(&items[i]))
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].namespace != groups[j].namespace {
			return groups[i].namespace < groups[j].namespace
		}
		return groups[i].key < groups[j].key
	})
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}, ColumnDefinitions: groupColumns}
	for _, g := range groups {
		limit := "none"
		if g.maxRestarts >= 0 {
			limit = strconv.FormatInt(g.maxRestarts, 10)
		}
		cause, last := "-", "-"
		if g.generation > 0 {
			cause = fmt.Sprintf("%s/%s exit %d", clean(g.cause.Pod), clean(g.cause.Container), g.cause.ExitCode)
			if !g.causeTime.IsZero() {
				last = duration.HumanDuration(now.Sub(g.causeTime)) + " ago"
			}
		}
		obj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: GroupResource.GroupVersion().String(), Kind: "GroupRestart"},
			ObjectMeta: metav1.ObjectMeta{Name: clean(g.name), Namespace: clean(g.namespace)}}
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells:  []any{clean(g.key), int64(g.generation), limit, cause, last, g.roundText(), clean(g.name)},
			Object: runtime.RawExtension{Object: obj},
		})
	}
	return t
}

// roundText is how far the current generation's round has come, from the
// node agents' reports of it: "done" once every member has started again,
// else the members stopped or started so far of those reported.
func (g groupState) roundText() string {
	if g.generation == 0 {
		return "-"
	}
	var members, stopped, started int
	for _, r := range g.nodes {
		if r.Generation != g.generation {
			continue
		}
		members += r.Members
		stopped += r.Stopped
		started += r.Started
	}
	switch {
	case members == 0:
		return "delivering"
	case started >= members:
		return "done"
	case stopped < members:
		return fmt.Sprintf("stopping %d/%d", stopped, members)
	default:
		return fmt.Sprintf("starting %d/%d", started, members)
	}
}

// PrintGroups prints the group table after the container rows, with its
// own header, in the table formats (the others print containers only).
func (p *StatusPrinter) PrintGroups(w io.Writer, items []unstructured.Unstructured) error {
	if p.Format != FormatTable && p.Format != FormatWide {
		return nil
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	if p.printed {
		fmt.Fprintln(w)
	}
	tp := printers.NewTablePrinter(printers.PrintOptions{Wide: p.Format == FormatWide, WithNamespace: p.AllNamespaces, NoHeaders: p.NoHeaders})
	tw := printers.GetNewTabWriter(w)
	if err := tp.PrintObj(GroupTable(items, now()), tw); err != nil {
		return err
	}
	return tw.Flush()
}
