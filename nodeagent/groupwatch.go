package nodeagent

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// groupWatches keeps a copy of the GroupRestart objects of the groups
// with members on this node, and of no other: one watch per object,
// narrowed to its name, opened when the group's first member appears on
// the node and closed when its last one has gone. A cluster-wide informer
// held every group of every namespace, and GroupRestart objects outlive
// nothing but their workload: 20,000 of them took an agent from 30 to
// 194 MiB, over its 128 Mi limit, on nodes that ran none of them.
// Owned by groupLoop's goroutine.
type groupWatches struct {
	client dynamic.Interface
	byID   map[string]*groupWatch // namespace/name
}

type groupWatch struct {
	store cache.Store
	stop  context.CancelFunc
}

func newGroupWatches(client dynamic.Interface) *groupWatches {
	return &groupWatches{client: client, byID: map[string]*groupWatch{}}
}

// keep opens a watch for each of ids not watched yet and closes the
// watches of the others.
func (w *groupWatches) keep(ctx context.Context, ids map[string]bool) {
	for id, gw := range w.byID {
		if !ids[id] {
			gw.stop()
			delete(w.byID, id)
		}
	}
	for id := range ids {
		if _, ok := w.byID[id]; ok {
			continue
		}
		ns, name, err := cache.SplitMetaNamespaceKey(id)
		if err != nil {
			continue
		}
		inf := dynamicinformer.NewFilteredDynamicInformer(w.client, agentapi.GroupResource, ns, 0, cache.Indexers{},
			func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			}).Informer()
		wctx, stop := context.WithCancel(ctx)
		go inf.RunWithContext(wctx)
		w.byID[id] = &groupWatch{store: inf.GetStore(), stop: stop}
	}
}

// GetByKey returns the watched copy of the object id (namespace/name):
// not there until its watch has listed it.
func (w *groupWatches) GetByKey(id string) (any, bool, error) {
	gw, ok := w.byID[id]
	if !ok {
		return nil, false, nil
	}
	return gw.store.GetByKey(id)
}

// stopAll closes every watch.
func (w *groupWatches) stopAll() {
	for id, gw := range w.byID {
		gw.stop()
		delete(w.byID, id)
	}
}
