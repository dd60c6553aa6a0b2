// Package kruntimes is the Go client of kruntimes: function Runs (invoke a
// handler registered once), session Runs (agent sandboxes: commands, files
// and watches of them, streamed output, background processes and terminals) and task Runs (run
// once: exit code, output and the files left behind), against a Kubernetes
// cluster or a `krt up` stack.
//
//	import kruntimes "kruntimes.io/sdk"
//
//	client, err := kruntimes.NewFromKubeconfig("", kruntimes.WithNamespace("default"))
//	// or kruntimes.NewFromStateDir(".kruntimes"), or kruntimes.New(gateway, token, kruntimes.WithCAFile("ca.crt"))
//	var out map[string]any
//	err = client.Function("hello-python").Invoke(ctx, map[string]string{"name": "X"}, &out)
//
//	sb, err := client.CreateSandbox(ctx, kruntimes.SandboxOptions{Runtime: "bash"})
//	defer sb.Close(context.Background())
//	res, err := sb.Commands.Run(ctx, kruntimes.Shell("echo hi"))
//	for ev, err := range sb.Commands.Stream(ctx, kruntimes.Argv("make", "test")) { … }
//	h, err := sb.Commands.Start(ctx, kruntimes.Shell("python3 -m http.server"), kruntimes.StartOptions{})
//	for ev, err := range h.Events(ctx) { … }   // background: replayed output, then live, then exited
//	term, err := sb.PTY.Create(ctx, kruntimes.PTYOptions{Rows: 24, Cols: 80})   // bash -i -l on a terminal
//	w, err := sb.Files.WatchDir(ctx, "src", true)   // returns once ready; w.GetNewEvents(), w.Events(ctx), w.Stop()
//	m, err := sb.GetMetrics(ctx)   // CPUSeconds, MemoryBytes, MemoryLimitBytes, Processes, DiskBytes, …
//
//	task, err := client.Tasks.Run(ctx, kruntimes.TaskOptions{Runtime: "python", Inline: "print(1)", Remove: true})
//	fmt.Print(*task.ExitCode, task.Stdout)   // a non-zero exit is a result, not an error
//	refs, err := client.Artifacts.List(ctx, "", "nightly")   // what a task left in $KRUNTIME_ARTIFACTS_DIR
//	err = client.Artifacts.Download(ctx, "", "nightly", "report.json", "report.json")
//
// On a cluster, a sandbox is a session Run created through the Kubernetes API
// as the kubeconfig's user (whose credentials — token, token file, exec
// plugin — also authenticate to the gateway); Close sets spec.termination
// Drain and waits until the Run ends, Kill sets Immediate. Against krt up the
// same calls use its state directory.
//
// Errors answered by the gateway or the Kubernetes API are *APIError values
// wrapped in one type per code (*NotFoundError, *BusyError, *NotReadyError,
// …, grouped by *InvalidRequestError, *UnavailableError and *ServerError), so
// errors.As picks either the code or the group. Nothing is retried
// implicitly: a call that may have run is never sent twice.
package kruntimes
