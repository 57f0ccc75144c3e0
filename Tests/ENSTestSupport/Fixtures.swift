/// Documents more than one module's tests read.
public enum Fixtures {
    /// Exchange Online's form: soap11 prefix, XML declaration, t:/m: prefixes.
    public static let exchangeOnlineSendNotification = """
        <?xml version="1.0" encoding="utf-8"?>
        <soap11:Envelope xmlns:soap11="http://schemas.xmlsoap.org/soap/envelope/">
          <soap11:Header><t:RequestServerVersion xmlns:t="http://schemas.microsoft.com/exchange/services/2006/types" \
        Version="Exchange2010"/></soap11:Header>
          <soap11:Body>
            <m:SendNotification xmlns:m="http://schemas.microsoft.com/exchange/services/2006/messages" \
        xmlns:t="http://schemas.microsoft.com/exchange/services/2006/types">
              <m:ResponseMessages>
                <m:SendNotificationResponseMessage ResponseClass="Success">
                  <m:ResponseCode>NoError</m:ResponseCode>
                  <m:Notification>
                    <t:SubscriptionId>sub-1</t:SubscriptionId>
                    <t:PreviousWatermark>wm-0</t:PreviousWatermark>
                    <t:MoreEvents>false</t:MoreEvents>
                    <t:NewMailEvent>
                      <t:Watermark>wm-1</t:Watermark>
                      <t:TimeStamp>2026-11-22T10:00:00Z</t:TimeStamp>
                      <t:ItemId Id="item-1" ChangeKey="ck"/>
                      <t:ParentFolderId Id="inbox" ChangeKey="ck"></t:ParentFolderId>
                    </t:NewMailEvent>
                    <t:CreatedEvent>
                      <t:Watermark>wm-2</t:Watermark>
                      <t:TimeStamp>2026-11-22T10:00:00Z</t:TimeStamp>
                      <t:ItemId Id="item-1" ChangeKey="ck"/>
                      <t:ParentFolderId Id="inbox" ChangeKey="ck"/>
                    </t:CreatedEvent>
                    <t:NewMailEvent>
                      <t:Watermark>wm-3</t:Watermark>
                      <t:TimeStamp>2026-11-22T10:00:01Z</t:TimeStamp>
                      <t:ItemId Id="item-2" ChangeKey="ck"/>
                      <t:ParentFolderId Id="inbox" ChangeKey="ck"/>
                    </t:NewMailEvent>
                  </m:Notification>
                </m:SendNotificationResponseMessage>
              </m:ResponseMessages>
            </m:SendNotification>
          </soap11:Body>
        </soap11:Envelope>
        """
}
