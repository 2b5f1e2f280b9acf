package bus

// ResponseCacheInvalidateSubject carries the name of a model (a
// google.protobuf.StringValue) whose responses no gateway may answer from its cache any more: a
// gateway publishes it before and after it has the model loaded (a
// reload) or unloaded through the repository API, and every gateway drops
// the model's entries from its local response cache.
const ResponseCacheInvalidateSubject = Prefix + ".respcache.invalidate"
