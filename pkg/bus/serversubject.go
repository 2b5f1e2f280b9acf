package bus

// The queries of Triton's server API that a Triton backend makes from
// inside an executor (TRITONSERVER_ServerMetadata, ...ModelMetadata,
// ...ModelConfig, ...ModelStatistics, ...ModelIndex). Any one gateway
// answers them (queue QueueGateways) as its gRPC API answers a client, so
// a backend sees the constellation as a client does: the request and the
// reply are the GRPCInferenceService messages of the same name.

const serverQueryPrefix = Prefix + ".server."

// Subjects of the server queries, each "nereid.v1.server.<query>".
const (
	// ServerMetadataSubject: inference.ServerMetadataRequest ->
	// inference.ServerMetadataResponse.
	ServerMetadataSubject = serverQueryPrefix + "metadata"
	// ModelMetadataSubject: inference.ModelMetadataRequest ->
	// inference.ModelMetadataResponse.
	ModelMetadataSubject = serverQueryPrefix + "model_metadata"
	// ModelConfigSubject: inference.ModelConfigRequest ->
	// inference.ModelConfigResponse.
	ModelConfigSubject = serverQueryPrefix + "model_config"
	// ModelStatisticsSubject: inference.ModelStatisticsRequest ->
	// inference.ModelStatisticsResponse.
	ModelStatisticsSubject = serverQueryPrefix + "model_statistics"
	// RepositoryIndexSubject: inference.RepositoryIndexRequest ->
	// inference.RepositoryIndexResponse.
	RepositoryIndexSubject = serverQueryPrefix + "repository_index"
)

// ServerQuerySubjects are every server query subject.
var ServerQuerySubjects = []string{ServerMetadataSubject, ModelMetadataSubject, ModelConfigSubject, ModelStatisticsSubject, RepositoryIndexSubject}
