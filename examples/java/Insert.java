// Record an event in the outbox in the same transaction as the business change.
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//     java -cp /usr/share/java/postgresql.jar examples/java/Insert.java
//
// (Any PostgreSQL JDBC driver jar works; Debian's is libpostgresql-jdbc-java.)
// The relay must have created its schema (it does at start, or run
// `outbox-relay migrate`). Each run pays a new order and records its event
// with idempotency key order-<id>-paid: the key names the business event, so
// a retry of the same transaction is a no-op, and consumers drop a copy they
// already processed by that key.

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Properties;

public class Insert {
  public static void main(String[] args) throws Exception {
    try (Connection conn = connect(System.getenv("DATABASE_URL"))) {
      // Setup for this example only: the business table and a new order.
      long orderId;
      try (var st = conn.createStatement()) {
        st.execute("CREATE TABLE IF NOT EXISTS example_orders "
            + "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, status text NOT NULL)");
        try (var rs = st.executeQuery("INSERT INTO example_orders (status) VALUES ('new') RETURNING id")) {
          rs.next();
          orderId = rs.getLong(1);
        }
      }

      conn.setAutoCommit(false);
      try {
        try (var st = conn.prepareStatement("UPDATE example_orders SET status = 'paid' WHERE id = ?")) {
          st.setLong(1, orderId);
          st.executeUpdate();
        }
        int inserted;
        try (var st = conn.prepareStatement(
            "INSERT INTO outbox.messages (topic, payload, key, headers, idempotency_key) " +
            "VALUES (?, ?, ?, ?::jsonb, ?) ON CONFLICT (idempotency_key) DO NOTHING")) {
          st.setString(1, "orders.paid");
          st.setBytes(2, ("{\"order_id\": " + orderId + "}").getBytes(StandardCharsets.UTF_8));
          st.setString(3, "order-" + orderId);
          st.setString(4, "{\"content-type\": \"application/json\"}");
          st.setString(5, "order-" + orderId + "-paid");
          inserted = st.executeUpdate();
        }
        conn.commit();
        System.out.println("order " + orderId + " paid; outbox rows inserted: " + inserted
            + " (idempotency key order-" + orderId + "-paid)");
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
