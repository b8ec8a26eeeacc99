package cluster

// BuildBusyboxImageAs writes the busybox image (Debian's busybox-static, the
// files of BusyboxImage) under another reference, ref, as the docker-archive
// dir/busybox-as.tar, for Options.Images: upstream's e2e specs name their
// images by registry (registry.k8s.io/e2e-test-images/busybox:TAG), and with
// no registry reachable the node must hold that exact reference before a
// pod asks for it. It returns the archive's path.
func BuildBusyboxImageAs(dir, ref string) (string, error) {
	return buildBusybox(dir, ref, "busybox-as.tar", "")
}
