package apiserver_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

// TestImageVolumeDeliveryPerCluster: --delivery=auto's decision against
// the real API server of each release, with its default ImageVolume gate
// (beta and off in 1.34, on from 1.35): image volumes only where that
// server keeps them, every kubelet is 1.35 or newer and every runtime
// mounts them (containerd 2.1, CRI-O 1.31), so that one old node of an
// upgrade turns the whole cluster back to the copy. And the pod the image
// delivery writes is one that server stores as written (1.35 on) or
// refuses (1.34), never one it silently changes.
func TestImageVolumeDeliveryPerCluster(t *testing.T) {
	forEachAPIServer(t, func(t *testing.T, client kubernetes.Interface, gitVersion string, kv rules.KubeVersion) {
		serverKeeps := kv >= rules.Kube135
		ctx := context.Background()
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rs"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		d := &webhook.ImageVolumeDetector{Client: client, Namespace: "rs", Image: "registry.test/restart-supervisor@sha256:" + strings.Repeat("ab", 32)}
		if d.Delivery() != injector.DeliveryCopy {
			t.Fatalf("before any check: %s, want copy", d.Delivery())
		}
		ok, why, err := d.Check(ctx)
		if err != nil || ok {
			t.Errorf("API server %s without nodes: %v %v (%s)", gitVersion, ok, err, why)
		}
		for _, step := range []struct {
			node, kubelet, runtime string
			want                   bool
		}{
			{"node-137", "v1.37.2", "containerd://2.4.2", serverKeeps},
			{"node-135-crio", "v1.35.4", "cri-o://1.31.0", serverKeeps},
			{"node-137-containerd-17", "v1.37.2", "containerd://1.7.27", false}, // a runtime without image volumes
			{"node-134", "v1.34.4", "containerd://2.1.0", false},                // an old kubelet
		} {
			addNodeWith(t, client, step.node, func(st *corev1.NodeStatus) {
				st.NodeInfo.KubeletVersion, st.NodeInfo.ContainerRuntimeVersion = step.kubelet, step.runtime
			})
			ok, why, err := d.Check(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ok != step.want {
				t.Errorf("API server %s, nodes down to %s %s: image volumes %v, want %v (%s)", gitVersion, step.kubelet, step.runtime, ok, step.want, why)
			}
			t.Logf("API server %s, nodes down to %s %s: %s", gitVersion, step.kubelet, step.runtime, why)
		}

		// The image delivery's pod, created for real.
		res, err := injector.New(injector.Options{SupervisorImage: d.Image, Delivery: injector.DeliveryImage}).MutatePod(ctx, nativeRulesPod("image-delivered"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := client.CoreV1().Pods("rs").Create(ctx, res.Pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("API server %s: the image-delivered pod refused: %v", gitVersion, err)
		}
		var bin *corev1.Volume
		for i := range got.Spec.Volumes {
			if got.Spec.Volumes[i].Name == contract.BinVolume {
				bin = &got.Spec.Volumes[i]
			}
		}
		switch {
		case !serverKeeps:
			// With ImageVolume off the server drops the volume and every
			// mount of it (pkg/api/pod/util.go dropImageVolumes, v1.34.4):
			// stored, and the wrapped container would not find the
			// supervisor. Why --delivery=auto asks the server first.
			if bin != nil || slices.ContainsFunc(got.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == contract.BinVolume }) {
				t.Errorf("API server %s kept the binary volume %+v or its mount", gitVersion, bin)
			}
		default:
			if bin == nil || bin.Image == nil || bin.Image.Reference != d.Image || len(got.Spec.InitContainers) != 0 {
				t.Errorf("API server %s stored the binary volume %+v and init containers %v", gitVersion, bin, names(got.Spec.InitContainers))
			}
			// The API server's defaulting: IfNotPresent for a digest.
			if bin != nil && bin.Image != nil && bin.Image.PullPolicy != corev1.PullIfNotPresent {
				t.Errorf("API server %s defaulted the image volume's pullPolicy to %q", gitVersion, bin.Image.PullPolicy)
			}
		}
	})
}
