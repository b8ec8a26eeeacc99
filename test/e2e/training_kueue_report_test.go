//go:build training

package e2e

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// TestQueueTrackCounts: what queueTrack counts from a run's polls, as a
// recreated JobSet's Workload goes through them: nothing before admission
// and the first PodsReady, the gap a recreation leaves, an eviction, and
// nothing from the poll that sees a pod Succeeded on.
func TestQueueTrackCounts(t *testing.T) {
	wl := func(uid string, evictions int64, conds ...string) unstructured.Unstructured {
		var cs []any
		for _, c := range conds {
			cs = append(cs, map[string]any{"type": c, "status": "True"})
		}
		u := unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": cs}}}
		if evictions > 0 {
			u.Object["status"].(map[string]any)["schedulingStats"] = map[string]any{"evictions": []any{
				map[string]any{"reason": "PodsReadyTimeout", "count": evictions}}}
		}
		u.SetUID(types.UID(uid))
		return u
	}
	start := time.Unix(1000, 0)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	var q queueTrack
	polls := []struct {
		t        float64
		wls      []unstructured.Unstructured
		running  int
		finished bool
	}{
		{0, nil, 0, false}, // not admitted yet
		{1, []unstructured.Unstructured{wl("a", 0, "QuotaReserved", "Admitted")}, 0, false}, // admitted, pods starting: not counted
		{2, []unstructured.Unstructured{wl("a", 0, "QuotaReserved", "Admitted", "PodsReady")}, 2, false},
		{3, []unstructured.Unstructured{wl("a", 0, "QuotaReserved", "Admitted")}, 0, false},              // recreation: unready and idle until the next poll
		{4, []unstructured.Unstructured{wl("a", 0, "QuotaReserved", "Admitted")}, 1, false},              // unready
		{5, []unstructured.Unstructured{wl("a", 1)}, 0, false},                                           // evicted: unready, admission lost for 2 s
		{7, []unstructured.Unstructured{wl("a", 1, "QuotaReserved", "Admitted", "PodsReady")}, 2, false}, // back
		{8, []unstructured.Unstructured{wl("a", 1, "QuotaReserved", "Admitted")}, 0, true},               // a pod Succeeded: nothing counted from here
		{9, []unstructured.Unstructured{wl("a", 1, "QuotaReserved", "Admitted")}, 0, true},
	}
	for _, p := range polls {
		q.sample(at(p.t), p.wls, p.running, p.finished)
	}
	if q.unready != 4*time.Second || q.admissionLost != 2*time.Second || q.idleQuota != time.Second || q.evictions() != 1 || !q.reasons["PodsReadyTimeout"] {
		t.Errorf("unready %v (want 4s), admission lost %v (2s), idle quota %v (1s), evictions %d (1), reasons %v",
			q.unready, q.admissionLost, q.idleQuota, q.evictions(), q.reasons)
	}
}
