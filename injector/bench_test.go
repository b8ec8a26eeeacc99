package injector

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkMutatePod measures the per-pod cost on a pod whose container
// has no command, its image already in the resolver's cache: patch-only is
// PodPatch, the webhook's call; with-pod is MutatePod, which also applies
// the patch to a copy of the pod for Result.Pod.
func BenchmarkMutatePod(b *testing.B) {
	inj, _ := goldenInjector(b)
	pod := &corev1.Pod{}
	pod.Name, pod.Namespace = "worker", "shop"
	pod.Spec.Containers = []corev1.Container{{Name: "worker", Image: "registry.test/app:1", Args: []string{"--queue", "q"}}}
	pol := corev1.ContainerRestartPolicyNever
	pod.Spec.Containers[0].RestartPolicy = &pol
	pod.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: "Restart",
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: "In", Values: []int32{42}}}}
	for _, tc := range []struct {
		name   string
		mutate func(context.Context, *corev1.Pod) (*Result, error)
	}{
		{"patch-only", inj.PodPatch},
		{"with-pod", inj.MutatePod},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if _, err := tc.mutate(context.Background(), pod); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := tc.mutate(context.Background(), pod); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pods/s")
		})
	}
}
