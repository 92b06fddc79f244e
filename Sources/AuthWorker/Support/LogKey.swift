/// Metadata keys of the worker's log lines, in one place so dashboards can rely on them.
public enum LogKey {
    public static let requestID = "auth.request_id"
    public static let userID = "auth.user_id"
    public static let method = "auth.method"
    public static let errorCode = "auth.error_code"
    public static let error = "error"
    public static let topic = "kafka.topic"
    public static let partition = "kafka.partition"
    public static let offset = "kafka.offset"
    public static let count = "count"
    public static let attempt = "retry.attempt"
    public static let delay = "retry.delay_ms"
}
