/// Metadata keys of the worker's log lines, in one place so dashboards can rely on them.
public enum LogKey {
    public static let requestID = "auth.request_id"
    /// The requests a retry holds up: up to 20 ids, comma-separated.
    public static let requestIDs = "auth.request_ids"
    /// A tenant's name (`auth.tenants`: several, comma-separated).
    public static let tenant = "auth.tenant"
    public static let tenants = "auth.tenants"
    public static let userID = "auth.user_id"
    public static let method = "auth.method"
    public static let errorCode = "auth.error_code"
    /// `ok`, an error code, `replayed`, `expired`, `dead_letter`.
    public static let outcome = "auth.outcome"
    /// Milliseconds from the poll that read a request to its answer's acknowledgement.
    public static let duration = "auth.duration_ms"
    /// The trace id of the request's `traceparent`.
    public static let traceID = "trace_id"
    public static let error = "error"
    public static let topic = "kafka.topic"
    public static let partition = "kafka.partition"
    public static let offset = "kafka.offset"
    public static let count = "count"
    public static let attempt = "retry.attempt"
    public static let delay = "retry.delay_ms"
}
