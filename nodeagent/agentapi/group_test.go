package agentapi

import (
	"github.com/restart-supervisor/restart-supervisor/contract"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"testing"
	"time"
)

func TestGroupOf(t *testing.T) {
	for _, c := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"batch.kubernetes.io/job-name": "j", contract.LabelGroup: "mine"}, contract.LabelGroup + "=mine"},
		{map[string]string{"batch.kubernetes.io/job-name": "j", "jobset.sigs.k8s.io/jobset-name": "js"}, "jobset.sigs.k8s.io/jobset-name=js"},
		{map[string]string{"leaderworkerset.sigs.k8s.io/name": "l", "leaderworkerset.sigs.k8s.io/group-index": "2"},
			"leaderworkerset.sigs.k8s.io/group-index=2,leaderworkerset.sigs.k8s.io/name=l"},
		// Half of LeaderWorkerSet's pair is no group of it.
		{map[string]string{"leaderworkerset.sigs.k8s.io/name": "l"}, ""},
		{map[string]string{"training.kubeflow.org/job-name": "pt"}, "training.kubeflow.org/job-name=pt"},
		{map[string]string{"ray.io/cluster": "rc"}, "ray.io/cluster=rc"},
		{map[string]string{"batch.kubernetes.io/job-name": "j"}, "batch.kubernetes.io/job-name=j"},
		{map[string]string{contract.LabelGroup: ""}, ""},
		{nil, ""},
	} {
		key, sel, ok := GroupOf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: c.labels}})
		if key != c.want || ok != (c.want != "") || ok && sel.String() != key {
			t.Errorf("GroupOf(%v) = %q, %v, %v; want %q", c.labels, key, sel, ok, c.want)
		}
	}
}

func TestGroupMember(t *testing.T) {
	pod := func(env string, deleting bool, phase corev1.PodPhase) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{contract.LabelGroup: "g"}},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Env: []corev1.EnvVar{{Name: contract.EnvConfig, Value: env}}}}},
			Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	group := `{"restartPolicyRules":[{"action":"RestartGroup"}]}`
	if !GroupMember(pod(group, false, corev1.PodRunning)) {
		t.Error("a running pod with a RestartGroup rule is a member")
	}
	if GroupMember(pod(`{"restartPolicyRules":[{"action":"Restart"}]}`, false, corev1.PodRunning)) {
		t.Error("a pod without RestartGroup is no member")
	}
	if GroupMember(pod(group, true, corev1.PodRunning)) {
		t.Error("a pod being deleted takes no group restart (KEP-4438)")
	}
	if GroupMember(pod(group, false, corev1.PodSucceeded)) {
		t.Error("a finished pod is no member")
	}
}

func TestRoundOver(t *testing.T) {
	const GroupStopWait = 30 * time.Second
	now := time.Now()
	st := GroupState{Generation: 2, CauseTime: now.Add(-time.Second), Released: 2, Done: 1}
	if RoundOver(st, now, GroupStopWait) {
		t.Error("released, not every node started again")
	}
	if !RoundOver(st, now.Add(GroupStopWait+2*time.Second), GroupStopWait) {
		t.Error("past GroupStopWait the agents release anyway")
	}
	st.Done = 2
	if !RoundOver(st, now, GroupStopWait) {
		t.Error("the coordinator marked it done")
	}
	if !RoundOver(GroupState{}, now, GroupStopWait) {
		t.Error("generation 0 has no round")
	}
}
