package agentstatus

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

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
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
// namespace and group; reports are the nodes' reports of the groups whose
// round is under way, by namespace/name of the object (a group missing
// there was not read).
func GroupTable(items []unstructured.Unstructured, reports map[string][]agentapi.NodeReport, now time.Time) *metav1.Table {
	groups := make([]agentapi.GroupState, 0, len(items))
	for i := range items {
		groups = append(groups, agentapi.GroupFromObject(&items[i]))
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].Namespace != groups[j].Namespace {
			return groups[i].Namespace < groups[j].Namespace
		}
		return groups[i].Key < groups[j].Key
	})
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}, ColumnDefinitions: groupColumns}
	for _, g := range groups {
		limit := "none"
		if g.MaxRestarts >= 0 {
			limit = strconv.FormatInt(g.MaxRestarts, 10)
		}
		cause, last := "-", "-"
		if g.Generation > 0 {
			cause = fmt.Sprintf("%s/%s exit %d", agentapi.Clean(g.Cause.Pod), agentapi.Clean(g.Cause.Container), g.Cause.ExitCode)
			if !g.CauseTime.IsZero() {
				last = duration.HumanDuration(now.Sub(g.CauseTime)) + " ago"
			}
		}
		obj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: agentapi.GroupResource.GroupVersion().String(), Kind: "GroupRestart"},
			ObjectMeta: metav1.ObjectMeta{Name: agentapi.Clean(g.Name), Namespace: agentapi.Clean(g.Namespace)}}
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells:  []any{agentapi.Clean(g.Key), int64(g.Generation), limit, cause, last, g.RoundText(reports[g.Namespace+"/"+g.Name]), agentapi.Clean(g.Name)},
			Object: runtime.RawExtension{Object: obj},
		})
	}
	return t
}

// PrintGroups prints the group table after the container rows, with its
// own header, in the table formats (the others print containers only).
func (p *StatusPrinter) PrintGroups(w io.Writer, items []unstructured.Unstructured, reports map[string][]agentapi.NodeReport) error {
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
	if err := tp.PrintObj(GroupTable(items, reports, now()), tw); err != nil {
		return err
	}
	return tw.Flush()
}
