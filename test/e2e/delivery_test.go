//go:build gang

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/restart-supervisor/restart-supervisor/podstate"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// TestGroupDeliveryCandidates measures the two ways a node agent could
// tell a member's supervisor of a group restart, on the real kubelet,
// each by its own mechanism: a file the agent writes into the pod's state
// volume (an emptyDir, on the node's disk), seen by the watcher the
// supervisor runs (podstate.Watch, inotify); and a pod annotation the
// agent patches, projected into the pod by a downward-API volume, seen
// once the kubelet rewrote that volume. GANG_DELIVERY_SAMPLES (default 7)
// samples each; docs/gang.md quotes the run.
func TestGroupDeliveryCandidates(t *testing.T) {
	repo, binDir := prepareNode(t)
	samples := 7
	if n, err := strconv.Atoi(os.Getenv("GANG_DELIVERY_SAMPLES")); err == nil && n > 0 {
		samples = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cluster.Options{BinDir: binDir, Repo: repo, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	tearDownAtEnd(t, c)
	e := &env{c: c, ns: "default"}
	spec := podSpec(corev1.RestartPolicyNever, 1, shell("app", "while :; do sleep 1; done", nil))
	spec.Volumes = []corev1.Volume{
		{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "meta", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}}}}},
	}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "state", MountPath: "/state"}, {Name: "meta", MountPath: "/meta"}}
	pod, err := c.Client.CoreV1().Pods(e.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "delivery"}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	volumes := filepath.Join(c.KubeletRoot(), "pods", string(pod.UID), "volumes")
	state := filepath.Join(volumes, "kubernetes.io~empty-dir", "state")
	annotations := filepath.Join(volumes, "kubernetes.io~downward-api", "meta", "annotations")
	waitUntil(t, "the pod's volumes", 2*time.Minute, func() bool {
		_, err1 := os.Stat(state)
		_, err2 := os.Stat(annotations)
		return err1 == nil && err2 == nil
	})

	w, err := podstate.Watch(state, 0, podstate.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var file, downward []time.Duration
	for i := 1; i <= samples; i++ {
		start := time.Now()
		if _, _, err := statevol.DeliverGroup(state, statevol.GroupCause{Generation: uint64(i), Group: "g", Pod: "p", Container: "c", ExitCode: 42}); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-w.C():
			file = append(file, time.Since(start))
			if g.N != uint64(i) {
				t.Fatalf("watcher saw generation %d, want %d", g.N, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("sample %d: the watcher did not see the delivery within 10 s", i)
		}

		value := fmt.Sprintf("restart-supervisor.dev/group-generation=\"%d\"", i)
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"restart-supervisor.dev/group-generation":"%d"}}}`, i)
		start = time.Now()
		if _, err := c.Client.CoreV1().Pods(e.ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := start.Add(3 * time.Minute)
		for {
			b, _ := os.ReadFile(annotations)
			if strings.Contains(string(b), value) {
				downward = append(downward, time.Since(start))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sample %d: the downward-API volume did not show the annotation within 3 min", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	sort.Slice(file, func(i, j int) bool { return file[i] < file[j] })
	sort.Slice(downward, func(i, j int) bool { return downward[i] < downward[j] })
	t.Logf("delivery, %d samples on Kubernetes %s: state-volume file → the supervisor's watcher: median %s, worst %s; "+
		"pod annotation patch → the downward-API volume: median %s, worst %s",
		samples, c.KubeVersion, file[len(file)/2].Round(10*time.Microsecond), file[len(file)-1].Round(10*time.Microsecond),
		downward[len(downward)/2].Round(time.Millisecond), downward[len(downward)-1].Round(time.Millisecond))
}
