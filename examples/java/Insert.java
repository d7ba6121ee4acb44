// Record an event in the outbox in the same transaction as the business change.
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//     java -cp /usr/share/java/postgresql.jar examples/java/Insert.java
//
// (Any PostgreSQL JDBC driver jar works; Debian's is libpostgresql-jdbc-java.)
// The relay must have created its schema (it does at start, or run
// `outbox-relay migrate`). Run it twice: the second outbox insert is a no-op
// while the first is pending, because the idempotency key is the same.

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Properties;

public class Insert {
  public static void main(String[] args) throws Exception {
    try (Connection conn = connect(System.getenv("DATABASE_URL"))) {
      // Setup for this example only: the business table and an order to pay.
      try (var st = conn.createStatement()) {
        st.execute("CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL)");
        st.execute("INSERT INTO orders (id, status) VALUES (42, 'new') ON CONFLICT (id) DO NOTHING");
      }

      conn.setAutoCommit(false);
      try {
        try (var st = conn.prepareStatement("UPDATE orders SET status = 'paid' WHERE id = ?")) {
          st.setLong(1, 42);
          st.executeUpdate();
        }
        int inserted;
        try (var st = conn.prepareStatement(
            "INSERT INTO outbox.messages (topic, payload, key, headers, idempotency_key) " +
            "VALUES (?, ?, ?, ?::jsonb, ?) ON CONFLICT (idempotency_key) DO NOTHING")) {
          st.setString(1, "orders.paid");
          st.setBytes(2, "{\"order_id\": 42}".getBytes(StandardCharsets.UTF_8));
          st.setString(3, "order-42");
          st.setString(4, "{\"content-type\": \"application/json\"}");
          st.setString(5, "order-42-paid");
          inserted = st.executeUpdate();
        }
        conn.commit();
        System.out.println("order 42 paid; outbox rows inserted: " + inserted);
      } catch (SQLException e) {
        conn.rollback();
        throw e;
      }
    }
  }

  // connect opens a JDBC connection from a postgres:// URL (DATABASE_URL, as
  // the relay reads it).
  static Connection connect(String databaseURL) throws SQLException {
    URI uri = URI.create(databaseURL);
    String url = "jdbc:postgresql://" + uri.getHost() + (uri.getPort() > 0 ? ":" + uri.getPort() : "")
        + uri.getPath() + (uri.getQuery() != null ? "?" + uri.getQuery() : "");
    Properties props = new Properties();
    if (uri.getUserInfo() != null) {
      String[] user = uri.getUserInfo().split(":", 2);
      props.setProperty("user", user[0]);
      if (user.length > 1) {
        props.setProperty("password", user[1]);
      }
    }
    return DriverManager.getConnection(url, props);
  }
}
