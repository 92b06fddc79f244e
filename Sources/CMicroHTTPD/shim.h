#ifndef AUTH_CMICROHTTPD_SHIM_H
#define AUTH_CMICROHTTPD_SHIM_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>

/// The limits the console's server starts with (MHD_start_daemon is variadic: Swift cannot call it).
struct auth_mhd_limits {
    /// Bytes of one connection's buffers: request line and headers beyond it are refused (431/413).
    size_t connection_memory;
    /// Open connections in all; and from one address.
    unsigned int connections;
    unsigned int connections_per_ip;
    /// Seconds a connection may stay silent (a slow client is cut off).
    unsigned int idle_timeout;
};

/// Starts a daemon with one thread per connection (one client's slow request blocks nobody else)
/// on an IPv4 address (`host`, e.g. "127.0.0.1" or "0.0.0.0") and `port` (0: any free port).
/// Returns NULL when the address is not IPv4 or the port cannot be bound (no SO_REUSEPORT: a second
/// console on a taken port fails to start rather than sharing its connections).
/// `notify` hears of every connection as it opens and closes (the server keeps its own account of
/// them: whole-request deadlines, eviction when full).
static inline struct MHD_Daemon *auth_mhd_start(const char *host, uint16_t port, struct auth_mhd_limits limits,
                                                MHD_AccessHandlerCallback handler, void *handler_context,
                                                MHD_RequestCompletedCallback completed, void *completed_context,
                                                MHD_NotifyConnectionCallback notify, void *notify_context) {
    struct sockaddr_in address;
    memset(&address, 0, sizeof(address));
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    if (inet_pton(AF_INET, host, &address.sin_addr) != 1) return NULL;
    return MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL, port, NULL, NULL, handler,
        handler_context, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        limits.connection_memory, MHD_OPTION_CONNECTION_LIMIT, limits.connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        limits.connections_per_ip, MHD_OPTION_CONNECTION_TIMEOUT, limits.idle_timeout, MHD_OPTION_NOTIFY_COMPLETED,
        completed, completed_context, MHD_OPTION_NOTIFY_CONNECTION, notify, notify_context, MHD_OPTION_END);
}

/// The port a daemon listens on (the one the kernel chose when started with 0).
static inline uint16_t auth_mhd_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

/// The client's IPv4 address as text into `buffer` (at least INET6_ADDRSTRLEN bytes); "" when unknown.
static inline void auth_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t size) {
    buffer[0] = 0;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL || info->client_addr == NULL) return;
    if (info->client_addr->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)info->client_addr)->sin_addr, buffer, (socklen_t)size);
    } else if (info->client_addr->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)info->client_addr)->sin6_addr, buffer, (socklen_t)size);
    }
}

/// Whether a connection notification is its opening (the enum's constants do not import).
static inline int auth_mhd_notify_is_start(enum MHD_ConnectionNotificationCode code) {
    return code == MHD_CONNECTION_NOTIFY_STARTED;
}

/// The connection's socket, or -1.
static inline int auth_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

/// A response with its own copy of `size` bytes at `data`.
static inline struct MHD_Response *auth_mhd_response_copy(size_t size, const void *data) {
    return MHD_create_response_from_buffer(size, (void *)data, MHD_RESPMEM_MUST_COPY);
}

#endif
